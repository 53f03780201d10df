"""`hami bench --http`: POST /filter over HTTPS, as kube-scheduler sends it, timed at both ends.

The server is a subprocess (hami.bench.http_server) running the very routes `hami serve` mounts.
This side sends ExtenderArgs sequentially on one keep-alive connection, with PascalCase keys and
every node name (nodeCacheCapable), one distinct pod uid per request, and reports the client's
round trip next to the server's own timings.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import platform
import pstats
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from hami.bench.filter_pod import filter_pod
from hami.bench.http_server import READY


@dataclass(frozen=True)
class HttpBenchConfig:
    nodes: int = 1000
    cards: int = 8
    pods: int = 8000
    requests: int = 2000
    warmup: int = 100
    memreq: int = 100
    policy: str = ""  # hami.io/gpu-scheduler-policy on the pod; empty: the scheduler's default
    keep_reservations: bool = False
    log: str = "json"  # json: as `hami serve` logs, written to /dev/null; off: warnings only
    profile: bool = False
    seed: int = 7


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _ms(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _row(label: str, samples: Sequence[float]) -> str:
    if not samples:
        return f"  {label:<44} (no samples)"
    return (
        f"  {label:<44} p50={_ms(samples, 0.5):7.3f} p90={_ms(samples, 0.9):7.3f} "
        f"p99={_ms(samples, 0.99):7.3f} max={max(samples) * 1000:7.3f} "
        f"mean={statistics.fmean(samples) * 1000:7.3f}"
    )


def _cpu() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


async def _drive(
    url: str, context: ssl.SSLContext, cfg: HttpBenchConfig, node_names: list[str]
) -> tuple[list[float], float, dict[str, Any], int, dict[str, int]]:
    connector = aiohttp.TCPConnector(ssl=context, limit=1)
    headers = {"Content-Type": "application/json"}
    outcomes: dict[str, int] = {}
    async with aiohttp.ClientSession(connector=connector) as session:

        async def filter_once(uid: str) -> None:
            pod = filter_pod(uid, cfg.memreq, cfg.policy)
            body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": node_names})
            async with session.post(f"{url}/filter", data=body, headers=headers) as resp:
                answer = orjson.loads(await resp.read())
            if resp.status != 200 or answer.get("error"):
                raise RuntimeError(f"/filter answered {resp.status}: {answer}")
            kind = "fit" if answer.get("nodenames") else "unschedulable"
            outcomes[kind] = outcomes.get(kind, 0) + 1

        for i in range(cfg.warmup):
            await filter_once(f"warmup-{i}")
        async with session.post(f"{url}/bench/begin") as resp:
            resp.raise_for_status()
        outcomes.clear()
        client: list[float] = []
        wall0 = time.perf_counter()
        for i in range(cfg.requests):
            t0 = time.perf_counter()
            await filter_once(f"bench-{i:07d}")
            client.append(time.perf_counter() - t0)
        wall = time.perf_counter() - wall0
        async with session.post(f"{url}/bench/end") as resp:
            server = orjson.loads(await resp.read())
    sample = {"Pod": filter_pod("bench-0000000", cfg.memreq, cfg.policy), "NodeNames": node_names}
    size = len(orjson.dumps({**sample, "Nodes": None}))
    return client, wall, server, size, outcomes


@dataclass(frozen=True)
class HttpBenchResult:
    """The printed report, and its figures in ms for a caller that compares them with targets."""

    text: str
    figures: dict[str, float]


def _figures(server: dict[str, Any], client: Sequence[float]) -> dict[str, float]:
    series = {
        "server_wall": server["handler"],
        "server_cpu": server["handler_cpu"],
        "client_round_trip": client,
    }
    return {
        f"{name}_{label}_ms": _ms(samples, q)
        for name, samples in series.items()
        if samples
        for label, q in (("p50", 0.5), ("p99", 0.99))
    }


def run_http_bench(cfg: HttpBenchConfig) -> HttpBenchResult:
    from hami.certs.selfsigned import write_dev_bundle

    with tempfile.TemporaryDirectory(prefix="hami-benchhttp-") as tmp:
        bundle = write_dev_bundle(Path(tmp) / "tls", ["127.0.0.1", "localhost"])
        port = _free_port()
        profile = str(Path(tmp) / "filter.prof") if cfg.profile else ""
        argv = [
            sys.executable,
            "-m",
            "hami.bench.http_server",
            "--port",
            str(port),
            "--cert",
            str(bundle.cert_file),
            "--key",
            str(bundle.key_file),
            "--nodes",
            str(cfg.nodes),
            "--cards",
            str(cfg.cards),
            "--pods",
            str(cfg.pods),
            "--seed",
            str(cfg.seed),
            "--requests",
            str(cfg.requests + cfg.warmup),
            "--log",
            cfg.log,
            *(["--keep-reservations"] if cfg.keep_reservations else []),
            *(["--profile", profile] if profile else []),
        ]
        with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as server:
            try:
                built = _wait_ready(server)
                context = ssl.create_default_context(cafile=str(bundle.ca_file))
                node_names = [f"gpu-node-{n:05d}" for n in range(cfg.nodes)]
                client, wall, answer, size, outcomes = asyncio.run(
                    _drive(f"https://127.0.0.1:{port}", context, cfg, node_names)
                )
                server.wait(30)
            finally:
                if server.poll() is None:
                    server.terminate()
                    server.wait(10)
        lines = [
            f"/filter over HTTPS: {cfg.nodes} nodes x {cfg.cards} cards, {cfg.pods} pods placed, "
            f"{cfg.requests} sequential requests (+{cfg.warmup} warm-up), one keep-alive "
            "connection",
            f"  Python {platform.python_version()}, asyncio default loop (uvloop off), TLS on, "
            f"{_cpu()}, {os.cpu_count()} cores",
            f"  request: {size / 1024:.1f} KiB ExtenderArgs (PascalCase, {len(node_names)} "
            f"NodeNames, {cfg.memreq} MiB pod, policy {cfg.policy or 'default'}); "
            f"server logging: {cfg.log}; reservations "
            f"{'kept' if cfg.keep_reservations else 'released after each answer'} "
            f"({answer['reservations']} held at the end)",
            f"  {built}",
            f"  answers: {outcomes}",
            _row("server, adapter observe hook (histogram)", answer["observed"]),
            _row("server, whole handler incl. reporter", answer["handler"]),
            _row("server, the handler's CPU (its thread)", answer["handler_cpu"]),
            _row("client round trip", client),
            f"  throughput: {cfg.requests / wall:.1f} requests/s (sequential), {wall:.2f}s wall",
        ]
        if profile:
            lines.append(_profile_report(profile))
        return HttpBenchResult("\n".join(lines), _figures(answer, client))


def _wait_ready(server: subprocess.Popen[str], timeout: float = 120) -> str:
    assert server.stdout is not None
    deadline = time.monotonic() + timeout
    built = ""
    while time.monotonic() < deadline:
        line = server.stdout.readline()
        if not line:
            raise RuntimeError(f"bench server exited with code {server.wait()} before it was ready")
        if line.startswith("benchhttp: cache"):
            built = line.strip().removeprefix("benchhttp: ")
        if line.strip() == READY:
            return built
    raise RuntimeError(f"bench server not ready within {timeout:g}s")


def _profile_report(path: str, top: int = 25) -> str:
    out = io.StringIO()
    stats = pstats.Stats(path, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    out.write("\n")
    stats.sort_stats("cumulative").print_stats(top)
    return "\nserver profile (cProfile, measured requests only):\n" + out.getvalue()
