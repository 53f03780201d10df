"""Who may serve /filter and /bind when several replicas run.

Like HAMi, the extender does not campaign: its sidecar kube-scheduler holds
the Lease, and the extender beside the active kube-scheduler is the leader.
The follower polls that Lease. Leadership lapses when the Lease has not been
seen renewed for its duration, measured on our own monotonic clock rather
than trusting the holder's timestamps, so a replica cut off from the API
server stops serving instead of deciding on a stale view.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from hami.kube.client import Kube
from hami.kube.errors import KubeError

log = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 15.0  # kube-scheduler's --leader-elect-lease-duration default


class Leadership(Protocol):
    @property
    def is_leader(self) -> bool: ...

    @property
    def term(self) -> int:
        """Counts transitions to leader, so state can be bound to the term it was built in."""

    @property
    def became_leader(self) -> asyncio.Event:
        """Set while leading, cleared on losing leadership."""

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
        self.became_leader = asyncio.Event()
        self.became_leader.set()

    async def run(self, stop: asyncio.Event) -> None:
        await stop.wait()


class LeaseFollower:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        *,
        poll_interval: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.poll_interval = poll_interval
        self.clock = clock
        self.is_leader = False
        self.term = 0
        self.became_leader = asyncio.Event()
        self._seen: tuple[Any, Any] | None = None  # (holderIdentity, renewTime) last observed
        self._seen_at = 0.0  # our clock when _seen last changed
        self._holder: str | None = None
        self._duration = DEFAULT_LEASE_SECONDS

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.poll()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.poll_interval)
        self._set(False)

    async def poll(self) -> None:
        """Read the Lease once and update leadership."""
        try:
            lease = await self.kube.get_lease(self.namespace, self.name)
        except KubeError as e:
            # Keep the last view; it lapses by itself once the Lease duration passes.
            log.warning(
                "could not read the leader Lease",
                extra={"namespace": self.namespace, "lease": self.name, "error": str(e)},
            )
        else:
            self._observe(lease)
        fresh = self.clock() - self._seen_at <= self._duration
        self._set(fresh and is_holder(self._holder, self.identity))

    def _observe(self, lease: Mapping[str, Any] | None) -> None:
        spec = (lease or {}).get("spec") or {}
        self._holder = spec.get("holderIdentity")
        self._duration = float(spec.get("leaseDurationSeconds") or DEFAULT_LEASE_SECONDS)
        seen = (self._holder, spec.get("renewTime"))
        if seen != self._seen:
            self._seen = seen
            self._seen_at = self.clock()

    def _set(self, leader: bool) -> None:
        context = {"identity": self.identity, "holder": self._holder or ""}
        if leader and not self.is_leader:
            self.term += 1
            self.became_leader.set()
            log.info("became leader", extra={**context, "term": self.term})
        elif not leader and self.is_leader:
            self.became_leader.clear()
            log.warning("lost leadership", extra={**context, "term": self.term})
        self.is_leader = leader
