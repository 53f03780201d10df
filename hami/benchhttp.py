"""`hami bench --http`: POST /filter over HTTPS, as kube-scheduler sends it, timed at both ends.

A server subprocess builds what /filter needs and nothing more: a ClusterCache of N nodes x C
cards (T4-like, split 10) with P pods placed (the same synthetic cluster as `hami bench`), a
Placement over it, the production FilterReporter and Prometheus histograms, and the very routes
`hami serve` mounts (scheduler.routes.routes), behind TLS from a throwaway dev bundle. There is
no API server: the bind verb is mounted but never called, and Events queue up unsent.

The client then sends ExtenderArgs sequentially on one keep-alive connection, with PascalCase
keys and every node name (nodeCacheCapable), one distinct pod uid per request. Server-side
time is taken twice: by the adapter's own observe hook (what hami_filter_duration_seconds
records: decode, decide, encode) and by a middleware around the whole handler (which also
covers reading the body and the reporter's score log lines and Events).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import logging
import os
import platform
import pstats
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from hami.engine import names

READY = "benchhttp: ready"


# --- the server (a subprocess) --------------------------------------------------------------


@dataclass
class _Samples:
    observed: list[float]
    handler: list[float]


def _server_app(
    args: argparse.Namespace, samples: _Samples, stop: asyncio.Event
) -> web.Application:
    import scheduler.routes
    from hami.bench import build_cluster
    from hami.kube.client import Kube
    from hami.kube.events import EventRecorder
    from hami.runtime.apps import MAX_BODY
    from hami.runtime.metrics import Metrics
    from hami.runtime.reporting import FilterReporter
    from hami.service.binding import Binder
    from hami.service.lockwatch import LockWatch
    from hami.service.placement import FilterOutcome, Placement

    started = time.perf_counter()
    cache = build_cluster(args.nodes, args.cards, args.pods, args.seed)
    print(
        f"benchhttp: cache of {args.nodes} nodes x {args.cards} cards, {args.pods} pods placed, "
        f"built in {time.perf_counter() - started:.2f}s",
        flush=True,
    )
    from kubernetes_asyncio.client import ApiClient, Configuration

    # Points at nothing: only /bind and the Event writer would use it, and neither runs here.
    kube = Kube(ApiClient(Configuration(host="http://127.0.0.1:9")))
    events = EventRecorder(kube, queue_size=args.requests + 1000)
    placement = Placement(cache)
    binder = Binder(kube, cache, events, now=lambda: datetime.now(UTC), locks=LockWatch())
    metrics = Metrics(cache, lambda: 0.0, lambda: events.dropped)
    reporter = FilterReporter(events)
    histogram = metrics.observer(metrics.filter_seconds)

    def observe_filter(result: str, seconds: float) -> None:
        histogram(result, seconds)
        samples.observed.append(seconds)

    filtered: list[str] = []

    def on_filtered(outcome: FilterOutcome) -> None:
        filtered.append(outcome.pod.uid)
        reporter(outcome)
        if not args.keep_reservations:
            # As if the bind had happened and been forgotten: the cluster stays at P pods.
            cache.forget(outcome.pod.uid)

    @web.middleware
    async def timing(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        t0 = time.perf_counter()
        response = await handler(request)
        if request.path == "/filter":
            samples.handler.append(time.perf_counter() - t0)
        return response

    profiler = cProfile.Profile() if args.profile else None

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def begin(_: web.Request) -> web.Response:
        samples.observed.clear()
        samples.handler.clear()
        if profiler is not None:
            profiler.enable()
        return web.Response(text="ok")

    async def end(_: web.Request) -> web.Response:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(args.profile)
        body = {
            "observed": samples.observed,
            "handler": samples.handler,
            "reservations": sum(cache.reservation(uid) is not None for uid in filtered),
            "events_dropped": events.dropped,
        }
        stop.set()
        return web.json_response(body, dumps=lambda o: orjson.dumps(o).decode())

    app = web.Application(client_max_size=MAX_BODY, middlewares=[timing])
    app.add_routes(
        scheduler.routes.routes(
            placement,
            binder,
            lambda: None,
            on_filtered,
            observe_filter,
            metrics.observer(metrics.bind_seconds),
        )
    )
    app.add_routes(
        [
            web.get("/healthz", healthz),
            web.post("/bench/begin", begin),
            web.post("/bench/end", end),
        ]
    )

    async def close_kube(_: web.Application) -> None:
        await kube.close()

    app.on_cleanup.append(close_kube)
    return app


def _setup_logging(mode: str) -> None:
    root = logging.getLogger()
    if mode == "off":
        root.setLevel(logging.WARNING)
        root.handlers[:] = [logging.NullHandler()]
        return
    from hami.runtime.logs import JsonFormatter

    # As `hami serve` logs (JSON at info), into /dev/null so the terminal stays readable.
    handler = logging.StreamHandler(open(os.devnull, "w"))  # noqa: SIM115 - lives as long as we do
    handler.setFormatter(JsonFormatter())
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


async def _serve(args: argparse.Namespace) -> None:
    from certs.tls import ReloadingServerContext

    _setup_logging(args.log)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    samples = _Samples([], [])
    app = _server_app(args, samples, stop)
    tls = ReloadingServerContext(args.cert, args.key)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.port, ssl_context=tls.context).start()
    print(READY, flush=True)
    try:
        await stop.wait()
        await asyncio.sleep(0.1)  # let the last answer leave
    finally:
        await runner.cleanup()


def _server_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m hami.benchhttp")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--cards", type=int, default=8)
    p.add_argument("--pods", type=int, default=8000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--keep-reservations", action="store_true")
    p.add_argument("--log", choices=("json", "off"), default="json")
    p.add_argument("--profile", default="")
    asyncio.run(_serve(p.parse_args(argv)))
    return 0


# --- the client (the `hami bench --http` process) -------------------------------------------


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


def _pod(uid: str, memreq: int, policy: str = "") -> dict[str, Any]:
    """A GPU pod as kube-scheduler sends it: after our webhook, with managedFields (~3 KB)."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(memreq)}
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": f"bench-{uid}",
            "namespace": "bench",
            "uid": uid,
            "resourceVersion": "123456",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "bench", "hami.run/bench": "true"},
            "annotations": {names.GPU_POLICY: policy} if policy else {},
            "managedFields": [
                {
                    "manager": "kubectl-client-side-apply",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-01-01T00:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:hami.run/bench": {}}},
                        "f:spec": {
                            "f:containers": {
                                'k:{"name":"cuda"}': {
                                    ".": {},
                                    "f:command": {},
                                    "f:env": {},
                                    "f:image": {},
                                    "f:imagePullPolicy": {},
                                    "f:name": {},
                                    "f:resources": {".": {}, "f:limits": {}},
                                    "f:terminationMessagePath": {},
                                    "f:terminationMessagePolicy": {},
                                }
                            },
                            "f:dnsPolicy": {},
                            "f:restartPolicy": {},
                            "f:schedulerName": {},
                            "f:securityContext": {},
                            "f:terminationGracePeriodSeconds": {},
                        },
                    },
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "cuda",
                    "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "command": ["sleep", "infinity"],
                    "env": [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}],
                    "resources": {"limits": limits, "requests": limits},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "securityContext": {},
            "schedulerName": "hami-scheduler",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


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
            pod = _pod(uid, cfg.memreq, cfg.policy)
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
    sample = {"Pod": _pod("bench-0000000", cfg.memreq, cfg.policy), "NodeNames": node_names}
    size = len(orjson.dumps({**sample, "Nodes": None}))
    return client, wall, server, size, outcomes


def run_http_bench(cfg: HttpBenchConfig) -> str:
    from certs.selfsigned import write_dev_bundle

    with tempfile.TemporaryDirectory(prefix="hami-benchhttp-") as tmp:
        bundle = write_dev_bundle(Path(tmp) / "tls", ["127.0.0.1", "localhost"])
        port = _free_port()
        profile = str(Path(tmp) / "filter.prof") if cfg.profile else ""
        argv = [
            sys.executable,
            "-m",
            "hami.benchhttp",
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
            _row("client round trip", client),
            f"  throughput: {cfg.requests / wall:.1f} requests/s (sequential), {wall:.2f}s wall",
        ]
        if profile:
            lines.append(_profile_report(profile))
        return "\n".join(lines)


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


if __name__ == "__main__":
    raise SystemExit(_server_main(sys.argv[1:]))
