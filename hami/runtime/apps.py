"""What each listener serves: the webhook with the probes, the extender, the metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol, TypeVar

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

import hami.extender.routes
import hami.webhook.routes
from hami.kube.events import EventRecorder
from hami.runtime.bodies import MAX_BODY
from hami.runtime.config import Settings
from hami.runtime.metrics import Metrics
from hami.runtime.pairprobe import pair_route
from hami.runtime.reporting import FilterReporter
from hami.service.admission import AdmissionService
from hami.service.binding import Binder
from hami.service.placement import Placement
from hami.service.requeue import Requeuer


class Runtime(Protocol):
    """What the listeners serve from: hami.runtime.app.Runtime (declared here, so that the
    wiring imports this module and not the other way round)."""

    settings: Settings
    events: EventRecorder
    requeuer: Requeuer
    placement: Placement
    binder: Binder
    admission: AdmissionService
    metrics: Metrics

    def unready(self) -> str | None: ...

    def hopeless(self) -> str | None: ...

    async def paced(self) -> None: ...

    async def not_serving(self) -> str | None: ...


T = TypeVar("T")


def each(*calls: Callable[[T], object]) -> Callable[[T], None]:
    """One callable that passes its argument to every one of `calls`, in order."""

    def call(value: T) -> None:
        for c in calls:
            c(value)

    return call


def _health(rt: Runtime) -> list[web.RouteDef]:
    async def healthz(_: web.Request) -> web.Response:
        hopeless = rt.hopeless()
        if hopeless is not None:
            return web.Response(status=503, text=hopeless)
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        unready = rt.unready()
        if unready is not None:
            return web.Response(status=503, text=unready)
        return web.Response(text="ok")

    return [
        web.get("/healthz", healthz),
        web.get("/readyz", readyz),
        pair_route(rt.settings.pair_healthz_url, rt.hopeless),
    ]


def webhook_app(rt: Runtime) -> web.Application:
    """What kube-apiserver and the kubelet's probes reach: /webhook, /healthz, /readyz."""
    app = web.Application(client_max_size=MAX_BODY)
    app.add_routes(_health(rt))
    app.add_routes(
        hami.webhook.routes.routes(rt.admission, rt.metrics.observer(rt.metrics.admission_seconds))
    )
    return app


def extender_app(rt: Runtime) -> web.Application:
    """/filter and /bind, for kube-scheduler only: served on a loopback address (the chart runs
    kube-scheduler in the same pod), since whoever can call them can reserve cards."""
    app = web.Application(client_max_size=MAX_BODY)
    app.add_routes(_health(rt))
    app.add_routes(
        hami.extender.routes.routes(
            rt.placement,
            rt.binder,
            rt.not_serving,
            rt.paced,
            each(
                FilterReporter(
                    rt.events, success_events=rt.settings.success_events, verbosity=rt.settings.v
                ),
                rt.requeuer.filtered,
            ),
            rt.metrics.observer(rt.metrics.filter_seconds),
            rt.metrics.observer(rt.metrics.bind_seconds),
        )
    )
    return app


def metrics_app(rt: Runtime) -> web.Application:
    app = web.Application()
    one_at_a_time = asyncio.Lock()  # concurrent scrapes wait rather than share the CPU

    async def metrics(request: web.Request) -> web.StreamResponse:
        # Written on a worker thread from a snapshot and sent in chunks: a large cluster's
        # scrape never holds up filter, bind or admission (hami.runtime.exposition).
        # Prometheus asks for gzip: most of a large cluster's answer is then kept compressed
        # between scrapes (hami.runtime.cardblocks), and a tenth of the text is sent.
        gzip = "gzip" in request.headers.get("Accept-Encoding", "")
        async with one_at_a_time:
            chunks = await asyncio.to_thread(rt.metrics.render, rt.metrics.snapshot(), gzip)
        headers = {"Content-Type": CONTENT_TYPE_LATEST}
        if gzip:
            headers["Content-Encoding"] = "gzip"
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        for chunk in chunks:
            await response.write(chunk)
        await response.write_eof()
        return response

    app.add_routes([web.get("/metrics", metrics)])
    return app
