"""`hami serve` running: the background tasks and the three listeners over a built Runtime
(hami.runtime.app), until the stop event; then the drain, in the order that loses nothing.

Apart from the wiring because it is the process's lifetime, not its parts: what starts, what
each listener serves, and what a shutdown waits for (the binds under way, then the Events
they wrote).
"""

import asyncio
import logging

from hami.runtime.app import Runtime
from hami.runtime.apps import extender_app, metrics_app, webhook_app
from hami.runtime.bodies import MAX_BODY, MIB, BodyBudget
from hami.runtime.chores import expire, freeze_heap, loop_lag
from hami.runtime.config import body_budget_mib
from hami.runtime.listeners import Listener, listen
from hami.runtime.sockets import connections_within_fds

log = logging.getLogger(__name__)


async def run(rt: Runtime, stop: asyncio.Event) -> None:
    s = rt.settings
    background = [
        asyncio.create_task(coro, name=name)
        for name, coro in (
            *((i.resource, i.run(stop)) for i in rt.informers),
            ("leadership", rt.leadership.run(stop)),
            ("events", rt.events.run(stop)),
            ("tls", rt.tls.watch(5.0, stop)),
            *([("certs", rt.certs.run(stop))] if rt.certs is not None else []),
            ("loop-lag", loop_lag(rt.metrics.loop_lag, stop)),
            ("freeze-heap", freeze_heap(rt.informers, rt.cache, rt.metrics.warm)),
            ("requeue", rt.requeuer.run(stop)),
            ("labels", rt.labels.run(stop)),
            *([("dra-placer", rt.placer.run(stop))] if rt.placer is not None else []),
            ("expire", expire(rt.cache, rt.metrics.reservations_expired, stop)),
            ("sight", rt.sight.run(stop)),
        )
    ]
    listening: list[Listener] = []
    cap = connections_within_fds(s.max_connections, listeners=3)
    if cap < s.max_connections:
        log.warning(
            "the open-file limit holds fewer connections than --max-connections",
            extra={"max_connections": s.max_connections, "per_listener": cap},
        )
    # One budget for every listener: what bounds the process's memory is their sum.
    bodies = BodyBudget(body_budget_mib(s) * MIB, MAX_BODY)
    try:
        for app, host, port, tls in (
            (webhook_app(rt), s.bind_address, s.port, rt.tls.context),
            (extender_app(rt), s.extender_bind_address, s.extender_port, None),
            (
                metrics_app(rt),
                s.metrics_bind_address,
                s.metrics_port,
                rt.tls.context if s.metrics_tls else None,
            ),
        ):
            listening.append(
                await listen(
                    app,
                    host,
                    port,
                    tls=tls,
                    read_timeout=s.read_timeout_seconds,
                    keepalive_timeout=s.keepalive_timeout_seconds,
                    shutdown_timeout=s.shutdown_grace_seconds,
                    max_connections=cap,
                    bodies=bodies,
                )
            )
        log.info(
            "serving",
            extra={
                "port": s.port,
                "extender": f"{s.extender_bind_address}:{s.extender_port}",
                "metrics": f"{s.metrics_bind_address}:{s.metrics_port}",
                "identity": s.identity,
                "max_connections": cap,
            },
        )
        await stop.wait()
    finally:
        log.info("shutting down: draining binds")
        rt.closing = True  # new filters and binds are refused from here on
        left = await rt.binder.drain(s.shutdown_grace_seconds)
        if left:
            log.warning("binds still running at shutdown", extra={"binds": left})
        for listener in listening:
            await listener.stop()
        await rt.binder.outcomes.close()
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await rt.events.flush(2.0)  # what the last binds said still reaches the pods
        await rt.kube.close()
        log.info("stopped")
