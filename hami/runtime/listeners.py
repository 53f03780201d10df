"""Listening sockets that no client can hold open for free, and that never close a connection
under a client that is about to use it.

aiohttp leaves a half-sent request waiting for as long as its keep-alive
timer (an hour by default) and asyncio gives a TLS handshake a minute, so a
few hundred slow clients would pin memory and sockets indefinitely. Two
deadlines bound what a client controls: `read_timeout` a new connection's TLS
handshake and first request line and headers (from the accept), a later
request's line and headers from their first byte, and every body once it is let in
(hami.runtime.bodies, which also bounds the bytes of all bodies held at once);
`keepalive_timeout` the idle time between requests of a connection that has
sent one. The idle deadline must be longer than the clients' own:
Go's HTTP transport keeps an idle connection for 90 s (IdleConnTimeout of
http.DefaultTransport, which client-go's transports inherit, and with them
kube-apiserver's webhook client and kube-scheduler's extender client). A
server that closes first races the client's next request on that connection,
and Go does not send a POST again: kube-apiserver reports `failed calling
webhook ... EOF` and, with failurePolicy Fail, refuses the pod.
"""

import asyncio
import ipaddress
import logging
import ssl
from asyncio.sslproto import SSLProtocol
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from hami.runtime.bodies import BodyBudget, bounded_bodies
from hami.runtime.sockets import Acceptor, Episodes, bind

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """True for an address only this machine (this pod's network namespace) can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Slots:
    """The open connections of one listener, `cap` at most. A connection over the cap takes the
    place of the oldest that has not sent a request yet, else of the one idle longest between
    requests, so that clients holding connections open without using them cannot lock out
    kube-apiserver; it is refused only when every open connection is in a request."""

    def __init__(self, cap: int, name: str) -> None:
        self.cap = cap
        self.name = name
        self._new: dict[_Connection, None] = {}  # oldest first
        self._idle: dict[_Connection, None] = {}  # idle longest first
        self._busy: set[_Connection] = set()
        self._full = Episodes()

    def __len__(self) -> int:
        return len(self._new) + len(self._idle) + len(self._busy)

    def admit(self, connection: "_Connection") -> bool:
        if len(self) >= self.cap:
            if self._full.happened(asyncio.get_running_loop().time()):
                log.warning(
                    "connection cap reached: new connections replace the oldest unused ones",
                    extra={"listener": self.name, "cap": self.cap},
                )
            unused = self._new or self._idle
            if not unused:
                return False
            oldest = next(iter(unused))
            self.leave(oldest)
            oldest.abort()
        self._new[connection] = None
        return True

    def busy(self, connection: "_Connection") -> None:
        if connection in self._new or connection in self._idle:
            self._new.pop(connection, None)
            self._idle.pop(connection, None)
            self._busy.add(connection)

    def idle(self, connection: "_Connection") -> None:
        if connection in self._busy:
            self._busy.remove(connection)
            self._idle[connection] = None

    def leave(self, connection: "_Connection") -> None:
        self._new.pop(connection, None)
        self._idle.pop(connection, None)
        self._busy.discard(connection)

    def abort_all(self) -> None:
        for connection in [*self._new, *self._idle, *self._busy]:
            self.leave(connection)
            connection.abort()


class _Connection(RequestHandler):
    """aiohttp's connection handler, with a slot of the listener's `_Slots` and a deadline for
    request headers apart from the idle keep-alive: a new connection's first request must have
    its headers in within `header_timeout` of the accept (TLS handshake included), a later
    request within `header_timeout` of its first byte; the app's first middleware
    (`_headers_in`) says when they are in. Missing a deadline aborts the connection: a TLS
    close would wait for the client's own close_notify."""

    __slots__ = ("_header_timeout", "_header_timer", "_in_request", "_raw", "_slots")

    def __init__(
        self, manager: web.Server, *, header_timeout: float, slots: _Slots, **kwargs: Any
    ) -> None:
        super().__init__(manager, **kwargs)
        self._header_timeout = header_timeout
        self._header_timer: asyncio.TimerHandle | None = None
        self._in_request = False
        self._slots = slots
        self._raw: asyncio.Transport | None = None

    def accepted(self, raw: asyncio.BaseTransport) -> None:
        """The socket is open, before any TLS handshake: take a slot, start the first deadline."""
        self._raw = cast(asyncio.Transport, raw)
        if not self._slots.admit(self):
            self._raw.abort()
            return
        loop = asyncio.get_running_loop()
        self._header_timer = loop.call_later(self._header_timeout, self._headers_late)

    def abort(self) -> None:
        if self._raw is not None:
            self._raw.abort()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._raw is None:  # plain HTTP: no TLS layer has taken the slot
            self.accepted(transport)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if data and not self._in_request and self._header_timer is None:
            loop = asyncio.get_running_loop()
            self._header_timer = loop.call_later(self._header_timeout, self._headers_late)

    def _headers_late(self) -> None:
        self._header_timer = None
        if not self._in_request:
            self.abort()

    def request_started(self) -> None:
        self._in_request = True
        self._slots.busy(self)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def request_finished(self) -> None:
        self._in_request = False
        self._slots.idle(self)

    def released(self) -> None:
        """The socket is closed (called twice over TLS: by each layer)."""
        self._slots.leave(self)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def connection_lost(self, exc: BaseException | None) -> None:
        self.released()
        super().connection_lost(exc)


class _TLS(SSLProtocol):
    """asyncio's TLS layer for one accepted connection, with a 16 KiB read buffer for its 256 KiB.
    That buffer is allocated and zeroed for every connection at the accept and is most of what
    an idle connection costs (measured per idle TLS connection: 284 KiB with 256 KiB, 44 KiB
    with 16 KiB); 16 KiB is the largest TLS record, so one read still takes in a whole record."""

    max_size = 16 * 1024
    # Encrypted bytes kept while the request above does not read (a body waiting for the
    # budget): asyncio's default is 256 KiB a connection, 256 MiB over 1,024 of them.
    incoming_high_water = 32 * 1024

    def __init__(
        self, connection: _Connection, context: ssl.SSLContext, handshake_timeout: float
    ) -> None:
        timeouts: dict[str, Any] = {
            "ssl_handshake_timeout": handshake_timeout,
            # A close waits this long at most for the client's close_notify (asyncio: 30 s).
            "ssl_shutdown_timeout": handshake_timeout,
        }
        super().__init__(
            asyncio.get_running_loop(),
            connection,
            context,
            None,  # type: ignore[arg-type]  # nobody awaits the handshake; asyncio takes None
            server_side=True,
            **timeouts,
        )
        self._http = connection
        # What the transport's set_read_buffer_limits calls; that transport comes later.
        cast(Any, self)._set_read_buffer_limits(high=self.incoming_high_water)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._http.accepted(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)
        self._http.released()


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
    acceptors: list[Acceptor]
    slots: _Slots = field(repr=False)

    @property
    def port(self) -> int:
        return int(self.acceptors[0].sock.getsockname()[1])

    @property
    def connections(self) -> int:
        """Connections open now, TLS handshakes under way included."""
        return len(self.slots)

    async def stop(self) -> None:
        for acceptor in self.acceptors:
            acceptor.close()
        await self.runner.cleanup()
        self.slots.abort_all()  # the handshakes aiohttp does not know of yet
        await asyncio.sleep(0)  # their transports close on the next turn


async def listen(
    app: web.Application,
    host: str,
    port: int,
    *,
    tls: ssl.SSLContext | None,
    read_timeout: float,
    keepalive_timeout: float,
    shutdown_timeout: float,
    max_connections: int,
    bodies: BodyBudget,
) -> Listener:
    app.middlewares.insert(0, _headers_in)
    app.middlewares.append(bounded_bodies(bodies, read_timeout, trusted=is_loopback(host)))
    handler_args: dict[str, Any] = {
        "access_log": None,
        "keepalive_timeout": keepalive_timeout,
        # A body left unread (refused, or its deadline passed) is not waited for: the
        # connection closes.
        "lingering_time": 0,
        # What a connection buffers before its body is let in: 32 KiB (twice this), not 128.
        "read_bufsize": 16 * 1024,
    }
    runner = web.AppRunner(
        app, handle_signals=False, shutdown_timeout=shutdown_timeout, **handler_args
    )
    await runner.setup()
    manager = runner.server
    assert manager is not None
    slots = _Slots(max_connections, f"{host}:{port}")
    loop = asyncio.get_running_loop()

    def connection() -> asyncio.BaseProtocol:
        http = _Connection(
            manager, loop=loop, header_timeout=read_timeout, slots=slots, **handler_args
        )
        return http if tls is None else _TLS(http, tls, read_timeout)

    try:
        sockets = await bind(host, port)
    except BaseException:
        await runner.cleanup()
        raise
    acceptors = [Acceptor(sock, connection) for sock in sockets]
    for acceptor in acceptors:
        acceptor.start()
    return Listener(runner, acceptors, slots)
