"""A bound on the API writes this process has in flight, handed out by priority.

kube-scheduler sends binds without any limit of its own, and each bind writes
to the API server. Left unbounded, a burst of binds piles thousands of writes
onto a saturated kube-apiserver: every call slows past its timeout, the
timeouts lead to retries and the throughput collapses. Held to a few writes in
flight, the API server answers each one quickly and the rest wait here, where
the write that finishes a bind goes before the one that starts the next, and
both before routine writes (Events, requeue nudges).
"""

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from enum import IntEnum


class Priority(IntEnum):
    """Lower goes first."""

    BINDING = 0  # the Binding: the last write of a bind, which kube-scheduler waits for
    # The other writes of a bind under way: HAMi's node lock (taken before the Binding, released
    # when a bind fails) and standalone mode's limits ConfigMap.
    BIND_STEP = 1
    ROUTINE = 2  # everything else: Events, requeue nudges, labels, ConfigMaps, certificates


class WriteLimiter:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a write limit of {limit} would never let a write through")
        self.limit = limit
        self.in_flight = 0
        self.queued = 0  # waiters that neither got a slot nor gave up
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._drained = asyncio.Event()
        self._drained.set()

    @property
    def backed_up(self) -> bool:
        """More writes wait than fit in flight: a new one would wait a full round or more."""
        return self.queued > self.limit

    async def room(self, within: float) -> bool:
        """Wait until the queue is no longer backed up, at most `within` seconds; whether it
        is not. The extender holds new decisions here: kube-scheduler decides serially and
        binds without a limit, so holding its filter is the one way to slow the binds it sends
        to the pace the API server takes our writes at."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                while self.backed_up:
                    self._drained.clear()
                    await self._drained.wait()
        return not self.backed_up

    @asynccontextmanager
    async def slot(self, priority: Priority) -> AsyncIterator[None]:
        await self._acquire(priority)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, priority: Priority) -> None:
        if self.in_flight < self.limit and not self.queued:
            self.in_flight += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (int(priority), next(self._order), waiter))
        self.queued += 1
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # The slot was handed over just as the caller gave up: pass it on.
                self._release()
            else:
                self._dequeued()
            raise

    def _release(self) -> None:
        while self._waiting:
            _, _, waiter = heapq.heappop(self._waiting)
            if not waiter.done():
                # The slot goes straight to the waiter: in_flight stays as it is.
                waiter.set_result(None)
                self._dequeued()
                return
        self.in_flight -= 1

    def _dequeued(self) -> None:
        self.queued -= 1
        if not self.backed_up:
            self._drained.set()
