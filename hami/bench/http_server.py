"""The server side of `hami bench --http`, a subprocess: `python -m hami.bench.http_server`.

It builds what /filter needs and nothing more: a ClusterCache of N nodes x C cards (T4-like,
split 10) with P pods placed (the same synthetic cluster as `hami bench`), a Placement over it
that asks the binder's node locks which nodes binds wait on (as `hami serve` wires it), the
production FilterReporter and Prometheus histograms, and the very routes `hami serve` mounts
(hami.extender.routes.routes), behind TLS from a throwaway dev bundle. There is no API server: the
bind verb is mounted but never called, and Events queue up unsent. The last --in-flight
decisions keep their reservation, as binds under way whose watch event has not come yet; the
older ones are forgotten, as if bound and gone, so the cluster stays at P pods.

The client times several series (pod shapes, node policies, candidates) on one server: each
is bracketed by /bench/begin and /bench/end, and /bench/stop ends the server.

Server-side time is taken twice: by the adapter's own observe hook (what
hami_filter_duration_seconds records: decode, decide, encode) and by a middleware around the
whole handler (which also covers reading the body and the reporter's score log lines and Events).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import logging
import os
import resource
import signal
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import orjson
from aiohttp import web

READY = "benchhttp: ready"


@dataclass
class _Samples:
    observed: list[float]
    handler: list[float]
    # The handler's CPU (this thread's), which a loaded machine does not inflate as it does wall.
    handler_cpu: list[float]
    # The whole process's CPU while the handler ran (every thread: the event recorder's too).
    process_cpu: list[float]


def _cpu_seconds() -> float:
    """The process's CPU so far, user and system, every thread."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _server_app(
    args: argparse.Namespace, samples: _Samples, stop: asyncio.Event
) -> web.Application:
    import hami.extender.routes
    from hami.bench.cluster import build_cluster
    from hami.kube.client import Kube
    from hami.kube.events import EventRecorder
    from hami.kube.leader import AlwaysLeader
    from hami.runtime.bodies import MAX_BODY
    from hami.runtime.choices import serve_defaults
    from hami.runtime.chores import freeze
    from hami.runtime.metrics import Metrics
    from hami.runtime.reporting import FilterReporter
    from hami.service.binding import Binder
    from hami.service.bindrules import Budget
    from hami.service.placement import FilterOutcome

    started = time.perf_counter()
    cache = build_cluster(args.nodes, args.cards, args.pods, args.seed, dra=args.dra)
    freeze(cache)  # as hami serve does once its cache has synced
    print(
        f"benchhttp: cache of {args.nodes} nodes x {args.cards} cards, {args.pods} "
        f"{'DRA claims allocated' if args.dra else 'pods placed'}, "
        f"built in {time.perf_counter() - started:.2f}s",
        flush=True,
    )
    from kubernetes_asyncio.client import ApiClient, Configuration

    # Points at nothing: only /bind and the Event writer would use it, and neither runs here.
    kube = Kube(ApiClient(Configuration(host="http://127.0.0.1:9")))
    events = EventRecorder(kube, queue_size=args.requests + 1000)
    choices = serve_defaults()
    placement = choices.placement(cache)
    binder = Binder(
        kube,
        cache,
        events,
        now=lambda: datetime.now(UTC),
        locks=choices.locks(),
        leadership=AlwaysLeader(),
        budget=Budget.within(timedelta(seconds=30), 5.0),
    )
    # As hami serve wires it: a pod goes where no bind waits, when binpack's node has some.
    placement.busy = binder.locker.busy
    metrics = Metrics(cache, lambda: 0.0, lambda: events.dropped)
    reporter = FilterReporter(events)
    histogram = metrics.observer(metrics.filter_seconds)

    def observe_filter(result: str, seconds: float) -> None:
        histogram(result, seconds)
        samples.observed.append(seconds)

    filtered: list[str] = []
    in_flight: deque[str] = deque()

    def on_filtered(outcome: FilterOutcome) -> None:
        filtered.append(outcome.pod.uid)
        reporter(outcome)
        if not args.keep_reservations:
            in_flight.append(outcome.pod.uid)
            while len(in_flight) > args.in_flight:
                # As if the bind had happened and been forgotten: the cluster stays at P pods.
                cache.forget(in_flight.popleft())

    @web.middleware
    async def timing(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
        response = await handler(request)
        if request.path == "/filter":
            samples.handler.append(time.perf_counter() - t0)
            samples.handler_cpu.append(time.thread_time() - c0)
            samples.process_cpu.append(time.process_time() - p0)
        return response

    profiler = cProfile.Profile() if args.profile else None

    async def serving() -> None:
        return None

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    began = [0.0]

    async def begin(_: web.Request) -> web.Response:
        for series in (samples.observed, samples.handler, samples.handler_cpu):
            series.clear()
        samples.process_cpu.clear()
        if profiler is not None:
            profiler.enable()
        began[0] = _cpu_seconds()
        return web.Response(text="ok")

    async def end(_: web.Request) -> web.Response:
        cpu = _cpu_seconds() - began[0]
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(args.profile)
        body = {
            "observed": samples.observed,
            "handler": samples.handler,
            "handler_cpu": samples.handler_cpu,
            "process_cpu": samples.process_cpu,
            "process_cpu_total": cpu,
            "reservations": sum(cache.reservation(uid) is not None for uid in filtered),
            "events_dropped": events.dropped,
        }
        # The next series starts from the same P pods.
        while in_flight:
            cache.forget(in_flight.popleft())
        filtered.clear()
        return web.json_response(body, dumps=lambda o: orjson.dumps(o).decode())

    async def end_all(_: web.Request) -> web.Response:
        stop.set()
        return web.Response(text="ok")

    app = web.Application(client_max_size=MAX_BODY, middlewares=[timing])
    app.add_routes(
        hami.extender.routes.routes(
            placement,
            binder,
            serving,
            serving,
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
            web.post("/bench/stop", end_all),
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
    from hami.runtime.logs import KlogFormatter

    # As `hami serve` logs (klog text at info), into /dev/null so the terminal stays readable.
    handler = logging.StreamHandler(open(os.devnull, "w"))  # noqa: SIM115 - lives as long as we do
    handler.setFormatter(KlogFormatter())
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


async def _serve(args: argparse.Namespace) -> None:
    from hami.certs.tls import ReloadingServerContext

    _setup_logging(args.log)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    samples = _Samples([], [], [], [])
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


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m hami.bench.http_server")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--cards", type=int, default=8)
    p.add_argument("--pods", type=int, default=8000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--keep-reservations", action="store_true")
    p.add_argument("--dra", action="store_true")
    p.add_argument("--in-flight", type=int, default=0)
    p.add_argument("--log", choices=("json", "off"), default="json")
    p.add_argument("--profile", default="")
    asyncio.run(_serve(p.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
