"""Request bodies in memory: one budget of bytes across every connection of every listener.

The connection cap bounds how many requests are in flight, not what their bodies hold: 1,024
clients each sending a 4 MiB body slowly to the webhook (the pod network reaches it) took
the process to 3.5 GiB, seven times the chart's memory limit. Each body is now checked against
the per-request limit by its Content-Length before a byte of it is read, and it holds its size
in the budget from then until its answer is sent; a body the budget has no room for waits
`wait` seconds at most, in arrival order, then gets a 503 with Retry-After. A chunked body
(no Content-Length) holds the per-request limit: what it will weigh is not known before it is
read, and refusing it would break HTTP/1.1 clients that may send one.

A large body (over `SMALL`) on a listener other clients than this pod's can reach may use
three quarters of the budget: the rest is kept for small ones and for the loopback listener,
so a flood of large bodies cannot keep out kube-apiserver's reviews (a few KiB) nor
kube-scheduler's /filter and /bind.

Refusals carry a Kubernetes Status: kube-apiserver shows its message in the error it returns
for the pod (`failed calling webhook ...: <message>`) and does not retry the call; the
webhook's failurePolicy then decides.
"""

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

# A review of a pod as kube-apiserver sends it is a few KiB; hami.webhook.routes works on bodies
# past this size off the event loop.
SMALL = 64 * 2**10
MIB = 2**20
MAX_BODY = 4 * MIB  # one body: a pod near etcd's 1.5 MiB limit, as JSON, with room to spare


class BudgetExhaustedError(Exception):
    """No room in the budget within the wait."""


class BodyBudget:
    """Bytes of request bodies held at once, `total` at most; `per_request` is one body's
    limit. Every hold is given back whatever ends the request (its answer, an error, the
    client hanging up, cancellation)."""

    def __init__(self, total: int, per_request: int, wait: float = 2.0) -> None:
        if total < 2 * per_request:
            raise ValueError(
                f"a budget of {total} bytes holds fewer than two bodies of {per_request}"
            )
        self.total = total
        self.per_request = per_request
        self.wait = wait
        self.held = 0
        self.refused = 0  # requests answered 503 for want of room
        self._waiters: deque[tuple[int, int, asyncio.Future[None]]] = deque()

    def ceiling(self, size: int, *, trusted: bool) -> int:
        """How full the budget may be with a body of `size` in it."""
        if trusted or size <= SMALL:
            return self.total
        return self.total - self.total // 4

    @contextlib.asynccontextmanager
    async def hold(self, size: int, ceiling: int) -> AsyncIterator[None]:
        """Hold `size` bytes for the body inside; raises BudgetExhaustedError after waiting `wait`."""
        await self._take(size, ceiling)
        try:
            yield
        finally:
            self._give(size)

    async def _take(self, size: int, ceiling: int) -> None:
        # Room goes to the waiters as it is given back (_give), so what is free now fits none
        # of them: a body it fits takes it (a review does not queue behind large bodies).
        if self.held + size <= ceiling:
            self.held += size
            return
        granted = asyncio.get_running_loop().create_future()
        entry = (size, ceiling, granted)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(self.wait):
                await granted
        except BaseException as e:
            if granted.done() and not granted.cancelled():
                self._give(size)  # granted just as the wait ended: nobody will use the room
            else:
                granted.cancel()
                with contextlib.suppress(ValueError):
                    self._waiters.remove(entry)
            if isinstance(e, TimeoutError):
                self.refused += 1
                raise BudgetExhaustedError from None
            raise

    def _give(self, size: int) -> None:
        self.held -= size
        # First fit in arrival order: a small body is not held up by a large one ahead.
        for entry in list(self._waiters):
            want, ceiling, granted = entry
            if granted.done():
                self._waiters.remove(entry)
            elif self.held + want <= ceiling:
                self._waiters.remove(entry)
                self.held += want
                granted.set_result(None)


def status(code: int, reason: str, message: str, retry_after: int | None = None) -> web.Response:
    """A refusal as a Kubernetes Status, which kube-apiserver's and kube-scheduler's clients
    decode and report by its message."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return web.Response(
        status=code, body=json.dumps(body).encode(), content_type="application/json",
        headers=headers,
    )  # fmt: skip


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def bounded_bodies(
    budget: BodyBudget, read_within: float, *, trusted: bool
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Middleware: a body is let in by its Content-Length and the budget, then read whole
    within `read_within` seconds (or 408); the handler's `request.read()` returns it.
    `trusted`: the listener is on loopback (kube-scheduler in the same pod)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.can_read_body or request.match_info.http_exception is not None:
            return await handler(request)  # no body, or a 404/405 that never reads it
        limit = budget.per_request
        length = request.content_length
        if length is not None and length > limit:
            return _too_big(length, limit)
        size = limit if length is None else length
        try:
            async with budget.hold(size, budget.ceiling(size, trusted=trusted)):
                try:
                    async with asyncio.timeout(read_within):
                        await request.read()
                except TimeoutError:
                    return status(
                        408, "Timeout", f"request body not received within {read_within:g}s"
                    )
                except web.HTTPRequestEntityTooLarge:
                    return _too_big(None, limit)
                return await handler(request)
        except BudgetExhaustedError:
            return status(
                503,
                "ServiceUnavailable",
                f"too many large request bodies in flight: this server holds "
                f"{budget.total / MIB:g} MiB of them at once and had no room for "
                f"{size / MIB:.3g} MiB within {budget.wait:g}s; retry shortly",
                retry_after=1,
            )

    return middleware


def _too_big(length: int | None, limit: int) -> web.Response:
    size = f"of {length} bytes " if length is not None else ""
    return status(
        413,
        "RequestEntityTooLarge",
        f"request body {size}is over this server's limit of {limit / MIB:g} MiB per request",
    )
