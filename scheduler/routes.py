"""aiohttp routes for the extender verbs: decode, ask the services, encode.

kube-scheduler treats a non-200 answer as a transport failure, so every answer
is 200 with the problem in `error` / `Error`, as HAMi answers.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from hami.extender.wire import (
    BadExtenderArgsError,
    decode_bind,
    decode_filter,
    encode_bind,
    encode_filter,
)
from hami.service.binderrors import BindError
from hami.service.binding import Binder
from hami.service.placement import FilterOutcome, Placement

log = logging.getLogger(__name__)

JSON = "application/json"
Observe = Callable[[str, float], None]
# None when this replica may serve, else why not (not synced, not the leader).
Gate = Callable[[], Awaitable[str | None]]
# Returns when a new decision may be made: the binds it leads to would not only queue.
Pace = Callable[[], Awaitable[object]]


Answer = Callable[[bytes], Awaitable[tuple[str, bytes]]]  # body -> (result label, answer)


def _timed(answer: Answer, observe: Observe) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        started = time.perf_counter()
        result, body = await answer(await request.read())
        observe(result, time.perf_counter() - started)
        return web.Response(body=body, content_type=JSON)

    return handle


def _result(outcome: FilterOutcome) -> str:
    if outcome.error:
        return "error"
    if not outcome.gpu:
        return "passthrough"
    return "fit" if outcome.node_names else "unschedulable"


def routes(
    placement: Placement,
    binder: Binder,
    gate: Gate,
    pace: Pace,
    on_filtered: Callable[[FilterOutcome], None],
    observe_filter: Observe,
    observe_bind: Observe,
) -> list[web.RouteDef]:
    async def filter_(body: bytes) -> tuple[str, bytes]:
        try:
            args = decode_filter(body)
        except BadExtenderArgsError as e:
            return "error", encode_filter(None, {}, str(e))
        closed = await gate()
        if closed is not None:
            return "error", encode_filter(None, {}, closed)
        await pace()
        try:
            outcome = placement.filter(args.pod, args.node_names)
        except Exception as e:
            # A pod the service cannot read: say so in the answer (a 500 reads as a transport
            # failure in kube-scheduler and loses the reason).
            log.exception("filter failed")
            return "error", encode_filter(
                None, {}, f"cannot filter this pod: {type(e).__name__}: {e}"
            )
        # Logs and Events wait until the answer is on its way: they never delay kube-scheduler.
        asyncio.get_running_loop().call_soon(on_filtered, outcome)
        return _result(outcome), encode_filter(outcome.node_names, outcome.failed, outcome.error)

    async def bind(body: bytes) -> tuple[str, bytes]:
        try:
            args = decode_bind(body)
        except BadExtenderArgsError as e:
            return "error", encode_bind(str(e))
        closed = await gate()
        if closed is not None:
            return "error", encode_bind(closed)
        try:
            await binder.bind(args.namespace, args.name, args.uid, args.node)
        except BindError as e:
            return "error", encode_bind(str(e))
        return "bound", encode_bind()

    return [
        web.post("/filter", _timed(filter_, observe_filter)),
        web.post("/bind", _timed(bind, observe_bind)),
    ]
