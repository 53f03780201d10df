"""Listening sockets that no client can hold open for free, and that never close a connection
under a client that is about to use it.

aiohttp leaves a half-sent request waiting for as long as its keep-alive
timer (an hour by default) and asyncio gives a TLS handshake a minute, so a
few hundred slow clients would pin memory and sockets indefinitely. Two
deadlines bound what a client controls: `read_timeout` the TLS handshake, a
request's line and headers from their first byte, and its body;
`keepalive_timeout` an idle connection (aiohttp's keep-alive timer, which also
runs from the moment a connection opens). The idle deadline must be longer
than the clients' own:
Go's HTTP transport keeps an idle connection for 90 s (IdleConnTimeout of
http.DefaultTransport, which client-go's transports inherit, and with them
kube-apiserver's webhook client and kube-scheduler's extender client). A
server that closes first races the client's next request on that connection,
and Go does not send a POST again: kube-apiserver reports `failed calling
webhook ... EOF` and, with failurePolicy Fail, refuses the pod.
"""

import asyncio
import ipaddress
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler


def is_loopback(host: str) -> bool:
    """True for an address only this machine (this pod's network namespace) can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_body_within(seconds: float) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Middleware: the whole body must arrive within `seconds`, or the client gets a 408.

    The handler's own `request.read()` then returns the body already read.
    """

    @web.middleware
    async def middleware(
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        if request.can_read_body:
            try:
                async with asyncio.timeout(seconds):
                    await request.read()
            except TimeoutError:
                raise web.HTTPRequestTimeout(
                    text=f"request body not received within {seconds:g}s\n"
                ) from None
        return await handler(request)

    return middleware


class _Connection(RequestHandler):
    """aiohttp's connection handler, with a deadline for a request's headers apart from the
    idle keep-alive: once a request's first bytes arrive, its headers must follow within
    `header_timeout`; the app's first middleware (`_headers_in`) says when they have."""

    __slots__ = ("_header_timeout", "_header_timer", "_in_request")

    def __init__(self, manager: web.Server, *, header_timeout: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._header_timeout = header_timeout
        self._header_timer: asyncio.TimerHandle | None = None
        self._in_request = False

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if data and not self._in_request and self._header_timer is None:
            loop = asyncio.get_running_loop()
            self._header_timer = loop.call_later(self._header_timeout, self._headers_late)

    def _headers_late(self) -> None:
        self._header_timer = None
        if not self._in_request:
            self.force_close()

    def request_started(self) -> None:
        self._in_request = True
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def request_finished(self) -> None:
        self._in_request = False

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)


@web.middleware
async def _headers_in(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    connection = request.protocol
    if not isinstance(connection, _Connection):
        return await handler(request)
    connection.request_started()
    try:
        return await handler(request)
    finally:
        connection.request_finished()


@dataclass
class Listener:
    """One application on one address; `stop` lets requests in flight finish."""

    runner: web.AppRunner
    server: asyncio.Server

    @property
    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        self.server.close()
        await self.server.wait_closed()
        await self.runner.cleanup()


async def listen(
    app: web.Application,
    host: str,
    port: int,
    *,
    tls: ssl.SSLContext | None,
    read_timeout: float,
    keepalive_timeout: float,
    shutdown_timeout: float,
) -> Listener:
    app.middlewares.insert(0, _headers_in)
    app.middlewares.append(read_body_within(read_timeout))
    handler_args: dict[str, Any] = {
        "access_log": None,
        "keepalive_timeout": keepalive_timeout,
        # A body left unread (the deadline passed) is not waited for: the connection closes.
        "lingering_time": 0,
    }
    runner = web.AppRunner(
        app, handle_signals=False, shutdown_timeout=shutdown_timeout, **handler_args
    )
    await runner.setup()
    manager = runner.server
    assert manager is not None
    loop = asyncio.get_running_loop()
    try:
        server = await loop.create_server(
            lambda: _Connection(manager, loop=loop, header_timeout=read_timeout, **handler_args),
            host,
            port,
            ssl=tls,
            ssl_handshake_timeout=read_timeout if tls is not None else None,
            # A burst of new connections (kube-apiserver opening more for a webhook burst) must
            # not overflow the accept queue: a dropped SYN costs the client a second or more.
            backlog=1024,
        )
    except BaseException:
        await runner.cleanup()
        raise
    return Listener(runner, server)
