"""aiohttp routes for the extender verbs: decode, ask the services, encode.

kube-scheduler treats a non-200 answer as a transport failure, so every answer
is 200 with the problem in `error` / `Error`, as HAMi answers.
"""

import asyncio
import logging
import time
from collections.abc import Callable

from aiohttp import web

from hami.service.binding import Binder, BindError
from hami.service.placement import FilterOutcome, Placement
from scheduler.wire import (
    BadExtenderArgsError,
    decode_bind,
    decode_filter,
    encode_bind,
    encode_filter,
)

log = logging.getLogger(__name__)

JSON = "application/json"
Observe = Callable[[str, float], None]
# None when this replica may serve, else why not (not synced, not the leader).
Gate = Callable[[], str | None]


def routes(
    placement: Placement,
    binder: Binder,
    gate: Gate,
    on_filtered: Callable[[FilterOutcome], None],
    observe_filter: Observe,
    observe_bind: Observe,
) -> list[web.RouteDef]:
    async def filter_(request: web.Request) -> web.Response:
        started = time.perf_counter()
        body = await request.read()
        try:
            args = decode_filter(body)
        except BadExtenderArgsError as e:
            observe_filter("error", time.perf_counter() - started)
            return web.Response(body=encode_filter(None, {}, str(e)), content_type=JSON)
        closed = gate()
        if closed is not None:
            observe_filter("error", time.perf_counter() - started)
            return web.Response(body=encode_filter(None, {}, closed), content_type=JSON)
        try:
            outcome = placement.filter(args.pod, args.node_names)
        except Exception as e:
            # A pod the service cannot read: say so in the answer (a 500 reads as a transport
            # failure in kube-scheduler and loses the reason).
            log.exception("filter failed")
            observe_filter("error", time.perf_counter() - started)
            error = f"cannot filter this pod: {type(e).__name__}: {e}"
            return web.Response(body=encode_filter(None, {}, error), content_type=JSON)
        answer = encode_filter(outcome.node_names, outcome.failed, outcome.error)
        result = (
            "error"
            if outcome.error
            else (
                "passthrough"
                if not outcome.gpu
                else ("fit" if outcome.node_names else "unschedulable")
            )
        )
        observe_filter(result, time.perf_counter() - started)
        # Logs and Events wait until the answer is on its way: they never delay kube-scheduler.
        asyncio.get_running_loop().call_soon(on_filtered, outcome)
        return web.Response(body=answer, content_type=JSON)

    async def bind(request: web.Request) -> web.Response:
        started = time.perf_counter()
        body = await request.read()
        try:
            args = decode_bind(body)
        except BadExtenderArgsError as e:
            observe_bind("error", time.perf_counter() - started)
            return web.Response(body=encode_bind(str(e)), content_type=JSON)
        closed = gate()
        if closed is not None:
            observe_bind("error", time.perf_counter() - started)
            return web.Response(body=encode_bind(closed), content_type=JSON)
        try:
            await binder.bind(args.namespace, args.name, args.uid, args.node)
        except BindError as e:
            observe_bind("error", time.perf_counter() - started)
            return web.Response(body=encode_bind(str(e)), content_type=JSON)
        observe_bind("bound", time.perf_counter() - started)
        return web.Response(body=encode_bind(), content_type=JSON)

    return [web.post("/filter", filter_), web.post("/bind", bind)]
