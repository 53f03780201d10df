"""Who may serve /filter and /bind when several replicas run, and for how long.

Like HAMi, the extender does not campaign: its sidecar kube-scheduler holds
the Lease, and the extender beside the active kube-scheduler is the leader.
Each stretch of leadership is a Term; a bind runs inside the term it started
in and writes nothing once that term has ended, so an old leader's binds stop
when its kube-scheduler steps down instead of racing the new leader's.

The Lease is watched, not polled: kube-scheduler releases it when it stops
(ReleaseOnCancel), and the other replica's kube-scheduler takes it at its next
retry, about two seconds later at most; the release reaches this process
within moments of being written, well before that. A Lease that stops being
renewed ends the term at two thirds of its duration on our own monotonic
clock (kube-scheduler's renewDeadline, 10 of 15 s by default: the moment the
holder itself gives up); no other replica can take it before the full
duration, so the last third is left for this replica's last writes to land.

A replica that has just become the leader waits `grace` seconds before it
serves: a previous leader that stepped down by releasing the Lease may still
have a bind write in flight, and each of those gives up after that long.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from hami.kube.api import KubeAPI
from hami.kube.calls import Obj
from hami.kube.informer import Informer

log = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 15.0  # kube-scheduler's --leader-elect-lease-duration default
# The part of the Lease duration after which an unrenewed Lease ends our term.
STALE_FRACTION = 2 / 3


class NotLeading(Exception):  # noqa: N818  (a state, like the kube errors)
    """The term a bind started in has ended."""


class Term:
    """One stretch of leadership."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.ended = asyncio.Event()

    @property
    def active(self) -> bool:
        return not self.ended.is_set()

    def check(self) -> None:
        """Raise NotLeading once the term has ended: the caller must write nothing more."""
        if self.ended.is_set():
            raise NotLeading(
                f"this replica stopped leading (term {self.number} ended); the new leader's "
                "kube-scheduler schedules the pod"
            )

    def end(self) -> None:
        self.ended.set()


class Leadership(Protocol):
    @property
    def is_leader(self) -> bool: ...

    @property
    def term(self) -> int:
        """Counts transitions to leader."""

    def current(self) -> Term | None:
        """The term binds may start in now: None when not leading or still in the grace."""

    async def serving(self, within: float) -> Term | None:
        """current(), waiting up to `within` seconds for a grace under way to end."""

    async def run(self, stop: asyncio.Event) -> None: ...


def is_holder(holder: str | None, identity: str) -> bool:
    """Whether the Lease holder is the kube-scheduler beside this replica.

    kube-scheduler's identity is "<hostname>_<uuid>". HAMi matches a bare
    prefix; matching up to the "_" also keeps replica "hami-1" from claiming
    "hami-10_...".
    """
    return bool(holder) and (holder == identity or str(holder).startswith(identity + "_"))


class AlwaysLeader:
    """Leadership for a single replica or with leader election off."""

    def __init__(self) -> None:
        self.is_leader = True
        self.term = 1
        self._term = Term(1)

    def current(self) -> Term | None:
        return self._term

    async def serving(self, within: float) -> Term | None:
        return self._term

    async def run(self, stop: asyncio.Event) -> None:
        await stop.wait()


class LeaseLeadership:
    """Follows the kube-scheduler Lease through a watch; `grace` as in the module docstring."""

    def __init__(
        self,
        kube: KubeAPI,
        namespace: str,
        name: str,
        identity: str,
        *,
        grace: float,
        check_interval: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.grace = grace
        self.check_interval = check_interval
        self.clock = clock
        self.is_leader = False
        self.term = 0
        self._term: Term | None = None
        self._serving_from = 0.0
        self._changed = asyncio.Event()
        self._seen: tuple[Any, Any] | None = None  # (holderIdentity, renewTime) last observed
        self._seen_at = 0.0  # our clock when _seen last changed
        self._holder: str | None = None
        self._duration = DEFAULT_LEASE_SECONDS
        self.informer = Informer(
            kube,
            "leases",
            self,
            namespace=namespace,
            field_selector=f"metadata.name={name}",
            # Renewed every two seconds: a silent watch is a broken one.
            inactivity=30.0,
        )

    # --- the informer's sink ----------------------------------------------------------------

    def replace(self, objects: list[Obj]) -> None:
        self.observe(objects[0] if objects else None)

    def upsert(self, obj: Obj) -> None:
        self.observe(obj)

    def delete(self, obj: Obj) -> None:
        self.observe(None)

    # --- state ------------------------------------------------------------------------------

    def observe(self, lease: Mapping[str, Any] | None) -> None:
        spec = (lease or {}).get("spec") or {}
        self._holder = spec.get("holderIdentity") or None
        self._duration = float(spec.get("leaseDurationSeconds") or DEFAULT_LEASE_SECONDS)
        seen = (self._holder, spec.get("renewTime"))
        if seen != self._seen:
            self._seen = seen
            self._seen_at = self.clock()
        self.update()

    def update(self) -> None:
        """Recompute leadership from what was last seen and how long ago."""
        fresh = self.clock() - self._seen_at <= self._duration * STALE_FRACTION
        leader = fresh and is_holder(self._holder, self.identity)
        context = {"identity": self.identity, "holder": self._holder or ""}
        if leader and not self.is_leader:
            self.term += 1
            self._term = Term(self.term)
            self._serving_from = self.clock() + self.grace
            log.info(
                "became leader",
                extra={**context, "term": self.term, "serving_in_s": self.grace},
            )
        elif not leader and self.is_leader:
            assert self._term is not None
            self._term.end()
            self._term = None
            why = "the Lease went to another holder" if fresh else "the Lease was not renewed"
            log.warning("lost leadership", extra={**context, "term": self.term, "why": why})
        if leader != self.is_leader:
            self.is_leader = leader
            self._changed.set()
            self._changed = asyncio.Event()

    def current(self) -> Term | None:
        if self._term is None or self.clock() < self._serving_from:
            return None
        return self._term

    async def serving(self, within: float) -> Term | None:
        loop = asyncio.get_running_loop()
        end = loop.time() + within
        while self._term is not None:
            left = min(self._serving_from - self.clock(), end - loop.time())
            if left <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        return self.current()

    async def run(self, stop: asyncio.Event) -> None:
        ticker = asyncio.create_task(self._tick(stop), name="leadership-staleness")
        try:
            await self.informer.run(stop)
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
            self._seen_at = float("-inf")
            self.update()

    async def _tick(self, stop: asyncio.Event) -> None:
        """Ends the term of a Lease nobody renews: no event says so."""
        while not stop.is_set():
            self.update()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.check_interval)
