"""`hami bench --http`: POST /filter over HTTPS, as kube-scheduler sends it, timed at both ends.

The server is a subprocess (hami.bench.http_server) running the very routes `hami serve` mounts.
This side sends ExtenderArgs sequentially on one keep-alive connection, with PascalCase keys and
the candidates' names (nodeCacheCapable), one distinct pod uid per request, and reports the
client's round trip next to the server's own timings. The candidates are every node, or the
share kube-scheduler sends by default: it stops filtering once it has found
numFeasibleNodesToFind nodes (percentageOfNodesToScore unset: 50 % less one per 125 nodes, at
least 5 % and 100 nodes), starting each pod where the last one stopped. Each series (a pod's
memory, its node policy, the candidates) is timed in turn on the same server.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from hami.bench.filter_pod import filter_pod
from hami.bench.http_server import READY

ALL, SHARE = "all", "share"  # the candidates: every node, or kube-scheduler's default share


def feasible_to_find(nodes: int) -> int:
    """How many nodes kube-scheduler filters before it stops, percentageOfNodesToScore unset
    (its numFeasibleNodesToFind): 500 of 5,000, 420 of 1,000."""
    if nodes < 100:
        return nodes
    percentage = max(5, 50 - nodes // 125)
    return max(100, nodes * percentage // 100)


def candidates(names: Sequence[str], kind: str, i: int) -> Sequence[str]:
    """The node names of the i-th request: all, or kube-scheduler's share, each request's
    starting where the one before stopped (its nextStartNodeIndex, every node feasible)."""
    if kind == ALL:
        return names
    share = feasible_to_find(len(names))
    start = i * share % len(names)
    window = names[start : start + share]
    return [*window, *names[: share - len(window)]]


@dataclass(frozen=True)
class Series:
    """What one series of requests asks: the pod's memory, its node policy, the candidates."""

    memreq: int = 100
    node_policy: str = ""  # hami.io/node-scheduler-policy; empty: the scheduler's (binpack)
    candidates: str = ALL

    def count(self, nodes: int) -> int:
        """Node names a request carries."""
        return nodes if self.candidates == ALL else feasible_to_find(nodes)

    def label(self, nodes: int) -> str:
        return (
            f"{self.memreq} MiB, node policy {self.node_policy or 'default'}, "
            f"{self.count(nodes)} candidates"
        )


@dataclass(frozen=True)
class HttpBenchConfig:
    nodes: int = 1000
    cards: int = 8
    pods: int = 8000
    requests: int = 2000  # per series
    warmup: int = 100  # per series
    series: tuple[Series, ...] = field(default_factory=lambda: (Series(),))
    policy: str = ""  # hami.io/gpu-scheduler-policy on the pod; empty: the scheduler's default
    keep_reservations: bool = False
    in_flight: int = 0  # decisions whose reservation is held, as binds under way
    log: str = "json"  # json: as `hami serve` logs, written to /dev/null; off: warnings only
    profile: bool = False
    seed: int = 7
    # The cards also published as ResourceSlices, allocated claims in the pods' place.
    dra: bool = False


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


@dataclass(frozen=True)
class _Timed:
    """One series as measured: the client's round trips and the server's own figures."""

    series: Series
    client: list[float]
    wall: float
    server: dict[str, Any]
    size: int
    outcomes: dict[str, int]


async def _drive(
    url: str, context: ssl.SSLContext, cfg: HttpBenchConfig, node_names: list[str]
) -> list[_Timed]:
    connector = aiohttp.TCPConnector(ssl=context, limit=1)
    headers = {"Content-Type": "application/json"}
    timed = []
    async with aiohttp.ClientSession(connector=connector) as session:

        async def filter_once(series: Series, uid: str, i: int, outcomes: dict[str, int]) -> int:
            pod = filter_pod(uid, series.memreq, cfg.policy, series.node_policy)
            names = candidates(node_names, series.candidates, i)
            body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})
            async with session.post(f"{url}/filter", data=body, headers=headers) as resp:
                answer = orjson.loads(await resp.read())
            if resp.status != 200 or answer.get("error"):
                raise RuntimeError(f"/filter answered {resp.status}: {answer}")
            kind = "fit" if answer.get("nodenames") else "unschedulable"
            outcomes[kind] = outcomes.get(kind, 0) + 1
            return len(body)

        for n, series in enumerate(cfg.series):
            outcomes: dict[str, int] = {}
            for i in range(cfg.warmup):
                await filter_once(series, f"warmup-{n}-{i}", i, outcomes)
            async with session.post(f"{url}/bench/begin") as resp:
                resp.raise_for_status()
            outcomes.clear()
            client: list[float] = []
            size = 0
            wall0 = time.perf_counter()
            for i in range(cfg.requests):
                t0 = time.perf_counter()
                size = await filter_once(series, f"bench-{n}-{i:07d}", cfg.warmup + i, outcomes)
                client.append(time.perf_counter() - t0)
            wall = time.perf_counter() - wall0
            async with session.post(f"{url}/bench/end") as resp:
                server = orjson.loads(await resp.read())
            timed.append(_Timed(series, client, wall, server, size, outcomes))
        async with session.post(f"{url}/bench/stop") as resp:
            resp.raise_for_status()
    return timed


@dataclass(frozen=True)
class HttpBenchResult:
    """The printed report, and its figures in ms for a caller that compares them with targets."""

    text: str
    figures: list[dict[str, Any]]  # one per series, in the config's order


def _figures(t: _Timed, nodes: int) -> dict[str, Any]:
    samples = {
        "server_wall": t.server["handler"],
        "server_cpu": t.server["handler_cpu"],
        "process_cpu": t.server["process_cpu"],
        "client_round_trip": t.client,
    }
    figures: dict[str, Any] = {
        "label": t.series.label(nodes),
        "memory": t.series.memreq,
        "node_policy": t.series.node_policy,
        "candidates": t.series.candidates,
        "candidate_count": t.series.count(nodes),
        "fits": t.outcomes.get("fit", 0),
        "requests": len(t.client),
        # Everything the server process spent while the series ran, every thread, per request.
        "process_cpu_per_request_ms": t.server["process_cpu_total"] / max(1, len(t.client)) * 1000,
    }
    figures.update(
        (f"{name}_{label}_ms", _ms(values, q))
        for name, values in samples.items()
        if values
        for label, q in (("p50", 0.5), ("p99", 0.99))
    )
    return figures


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
            str((cfg.requests + cfg.warmup) * len(cfg.series)),
            "--in-flight",
            str(cfg.in_flight),
            "--log",
            cfg.log,
            *(["--keep-reservations"] if cfg.keep_reservations else []),
            *(["--dra"] if cfg.dra else []),
            *(["--profile", profile] if profile else []),
        ]
        with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as server:
            try:
                built = _wait_ready(server)
                context = ssl.create_default_context(cafile=str(bundle.ca_file))
                node_names = [f"gpu-node-{n:05d}" for n in range(cfg.nodes)]
                timed = asyncio.run(_drive(f"https://127.0.0.1:{port}", context, cfg, node_names))
                server.wait(30)
            finally:
                if server.poll() is None:
                    server.terminate()
                    server.wait(10)
        lines = [
            f"/filter over HTTPS: {cfg.nodes} nodes x {cfg.cards} cards, {cfg.pods} "
            f"{'DRA claims allocated (cards in ResourceSlices too)' if cfg.dra else 'pods placed'}, "
            f"{cfg.requests} sequential requests a series (+{cfg.warmup} warm-up), one "
            "keep-alive connection",
            f"  Python {platform.python_version()}, asyncio default loop (uvloop off), TLS on, "
            f"{_cpu()}, {os.cpu_count()} cores",
            f"  {built}; server logging: {cfg.log}; GPU policy {cfg.policy or 'default'}; "
            + (
                "reservations kept"
                if cfg.keep_reservations
                else f"the last {cfg.in_flight} decisions' reservations held (binds under way)"
            ),
        ]
        for t in timed:
            lines += [
                f" {t.series.label(cfg.nodes)}: {t.size / 1024:.1f} KiB request, answers "
                f"{t.outcomes}, {t.server['reservations']} reservations held at the end",
                _row("server, adapter observe hook (histogram)", t.server["observed"]),
                _row("server, whole handler incl. reporter", t.server["handler"]),
                _row("server, the handler's CPU (its thread)", t.server["handler_cpu"]),
                _row("server, the process's CPU (every thread)", t.server["process_cpu"]),
                _row("client round trip", t.client),
                f"  the process's CPU per request: "
                f"{t.server['process_cpu_total'] / len(t.client) * 1000:.3f} ms; throughput: "
                f"{len(t.client) / t.wall:.1f} requests/s (sequential), {t.wall:.2f}s wall",
            ]
        if profile:
            lines.append(_profile_report(profile))
        return HttpBenchResult("\n".join(lines), [_figures(t, cfg.nodes) for t in timed])


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
