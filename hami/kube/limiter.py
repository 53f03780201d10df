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
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    @property
    def queued(self) -> int:
        return sum(1 for _, _, waiter in self._waiting if not waiter.done())

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
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # The slot was handed over just as the caller gave up: pass it on.
                self._release()
            raise

    def _release(self) -> None:
        while self._waiting:
            _, _, waiter = heapq.heappop(self._waiting)
            if not waiter.done():
                # The slot goes straight to the waiter: in_flight stays as it is.
                waiter.set_result(None)
                return
        self.in_flight -= 1
