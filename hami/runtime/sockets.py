"""Listening sockets and the process's file descriptors: accepting connections without
asyncio's flood of tracebacks when descriptors run out, and the open-file limit."""

import asyncio
import errno
import logging
import resource
import socket
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# File descriptors kept out of the listeners' share: the API client's pool (64 connections),
# watches, the log, certificate and configuration files, the event loop's own.
RESERVED_FDS = 256


class Episodes:
    """One log line per episode of a condition: when it first happens, and again only once it
    has not happened for `quiet` seconds."""

    def __init__(self, quiet: float = 60.0) -> None:
        self._quiet = quiet
        self._last = float("-inf")

    def happened(self, now: float) -> bool:
        new = now - self._last > self._quiet
        self._last = now
        return new


# Out of file descriptors, accepting stops for this long: the connections wait in the kernel's
# queue meanwhile, and the process's own API calls get the descriptors that free up first.
ACCEPT_PAUSE = 1.0
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class Acceptor:
    """Accepts the connections of one listening socket. Out of file descriptors (or kernel
    memory), it stops for `ACCEPT_PAUSE` and says so once per episode. asyncio's own accept loop
    goes on calling accept() after EMFILE, logging a traceback for each call and retrying each
    on a timer of its own: under the 1,024 soft limit of containerd 2.0's containers that wrote
    1.26 million tracebacks (655 MB) in 148 s."""

    def __init__(self, sock: socket.socket, factory: Callable[[], asyncio.BaseProtocol]) -> None:
        self.sock = sock
        self._factory = factory
        self._loop = asyncio.get_running_loop()
        self._resume: asyncio.TimerHandle | None = None
        self._exhausted = Episodes()
        self._opening: set[asyncio.Task[Any]] = set()

    def start(self) -> None:
        self._resume = None
        self._loop.add_reader(self.sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(128):  # then let the loop turn: a burst must not starve requests
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as e:
                if e.errno not in _OUT_OF_RESOURCES:
                    continue  # an error of that one connection (Linux reports network errors here)
                self._loop.remove_reader(self.sock.fileno())
                self._resume = self._loop.call_later(ACCEPT_PAUSE, self.start)
                if self._exhausted.happened(self._loop.time()):
                    log.warning(
                        "not accepting connections for now: out of resources",
                        extra={
                            "listener": self.sock.getsockname(),
                            "error": e.strerror,
                            "retry_seconds": ACCEPT_PAUSE,
                        },
                    )
                return
            task = self._loop.create_task(self._loop.connect_accepted_socket(self._factory, conn))
            self._opening.add(task)
            task.add_done_callback(self._opened)

    def _opened(self, task: asyncio.Task[Any]) -> None:
        self._opening.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("accepted connection lost before it opened", exc_info=task.exception())

    def close(self) -> None:
        if self._resume is not None:
            self._resume.cancel()
        else:
            self._loop.remove_reader(self.sock.fileno())
        self.sock.close()


async def bind(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on every address `host` names, as asyncio's create_server binds them."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as e:
                raise OSError(e.errno, f"cannot listen on {address}: {e.strerror}") from None
            # A burst of new connections (kube-apiserver opening more for a webhook burst) must
            # not overflow the accept queue: a dropped SYN costs the client a second or more.
            sock.listen(1024)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (containerd 2.0 leaves containers at a soft
    1,024): every connection is a descriptor, and so is every API call. Returns (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return soft, hard


def connections_within_fds(wanted: int, listeners: int) -> int:
    """The per-listener cap the open-file limit leaves room for, `RESERVED_FDS` kept aside."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, (soft - RESERVED_FDS) // listeners))
