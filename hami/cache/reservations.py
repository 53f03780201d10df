"""What a filter decision goes through until the watch shows the pod it placed.

    DECIDED --bind starts--> BINDING --Binding landed--> LANDED --watch shows the pod--> (gone)
       |  ^                    |                          ^
       |  +---bind failed------+                          | read back bound here
       |                       +--outcome unknown--> UNKNOWN --the pod read or seen unbound
       +--TTL runs out--> (gone)                                past the Binding, elsewhere,
                                                                or gone--> (gone)

Only a DECIDED reservation has a deadline: kube-scheduler binds right after it
filters, so a decision left alone that long lost its bind. A reservation whose
bind is running, whose Binding landed, or whose Binding may have landed holds
its cards with no deadline at all: only the pod itself may end it, seen bound
(its own allocation then counts instead), deleted, missing from a complete
relist that started after the Binding, or, for an UNKNOWN outcome, seen
unbound at a resourceVersion later than the one the Binding was sent for (the
Binding carries it as a precondition, so it can no longer land). A lagging or
stalled pod watch therefore delays the confirmation, never the counting: that
is what keeps two binds off one card while the watch is out of touch.

Only LANDED reservations measure the watch's lag (hami.cache.freshness): an
UNKNOWN one may never show up, and waiting for it would blind the process for
one pod's sake; hami.service.outcomes reads such pods back until it can tell.
"""

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from hami.engine.model import PodDevices
from hami.engine.versions import later


class Stage(Enum):
    DECIDED = "decided"  # filter chose the cards; no bind has started
    BINDING = "binding"  # a bind of this decision is under way
    LANDED = "landed"  # the Binding landed: the watch has yet to show the pod
    UNKNOWN = "unknown"  # the Binding may have landed: the pod is being read back


@dataclass(frozen=True, slots=True)
class Reservation:
    uid: str
    namespace: str
    name: str
    node: str
    devices: PodDevices
    n_init: int
    expires: float  # only a DECIDED reservation expires
    stage: Stage = Stage.DECIDED
    # Set once LANDED: when (clock) and in which relist epoch, to tell a relist that started
    # before the Binding (it may not show the pod yet) from one that started after it.
    landed_at: float = 0.0
    epoch: int = 0
    # The pod's containers, init first, for a decision that gives it other families' devices:
    # some of those families write what they read of them in the bind (BindContext).
    containers: tuple[Mapping[str, Any], ...] = ()
    # The pod's resourceVersion as filter saw it; once UNKNOWN, the one the last Binding was
    # sent for ("": none known, so only reading the pod back can end it).
    resource_version: str = ""
    # How many ResourceClaims of the pod (the DRA placer's, pinned to these devices) end it
    # once all are counted; 0: it ends when the pod is bound (its annotations count instead).
    claims: int = 0


class Reservations:
    """The reservations by pod uid and their stages, and which pods the watch has shown (how
    long their decisions wait for a bind); the counting is ClusterCache's."""

    def __init__(self, clock: Callable[[], float], ttl: float, unknown_ttl: float) -> None:
        self._clock = clock
        self._ttl = ttl
        # A filter for a pod the watch has not shown (yet) holds its cards this long only:
        # kube-scheduler filters pods it learnt of through its own watch, so ours sees them
        # within moments, and made-up pods must not fence cards off for the full TTL.
        self._unknown_ttl = min(unknown_ttl, ttl)
        self._known: set[str] = set()  # uids of the live pods the watch has shown
        self._by_uid: dict[str, Reservation] = {}
        # How many reservations each node holds, kept as they come and go: every filter under
        # contention reads it, and a burst holds hundreds of reservations.
        self._per_node: Counter[str] = Counter()
        # uid -> when it landed, in landing order: the first is the longest unconfirmed.
        self._landed: dict[str, float] = {}
        self._epoch = 0

    def ttl_of(self, uid: str) -> float:
        """How long a decision for the pod waits for its bind: less for one the watch never
        showed."""
        return self._ttl if uid in self._known else self._unknown_ttl

    def learn(self, uid: str, live: bool) -> None:
        """The watch showed the pod, live or finished."""
        if not live:
            self._known.discard(uid)
            return
        if uid in self._known:
            return
        self._known.add(uid)
        # The pod is real after all: its decision may wait for its bind the full TTL.
        self.extend(uid, self._clock() + self._ttl)

    def known_only(self, uids: set[str]) -> None:
        """A complete list showed these pods: forget having seen any other."""
        self._known &= uids

    def unknown(self, uid: str) -> None:
        """The pod was deleted."""
        self._known.discard(uid)

    def get(self, uid: str) -> Reservation | None:
        return self._by_uid.get(uid)

    def put(self, res: Reservation) -> None:
        self._landed.pop(res.uid, None)
        self._uncount(self._by_uid.get(res.uid))
        self._by_uid[res.uid] = res
        self._per_node[res.node] += 1

    def pop(self, uid: str) -> Reservation | None:
        self._landed.pop(uid, None)
        res = self._by_uid.pop(uid, None)
        self._uncount(res)
        return res

    def _uncount(self, res: Reservation | None) -> None:
        if res is None:
            return
        left = self._per_node[res.node] - 1
        if left:
            self._per_node[res.node] = left
        else:
            del self._per_node[res.node]

    def uids(self) -> list[str]:
        return list(self._by_uid)

    def nodes(self) -> Mapping[str, int]:
        """How many reservations each node holds (none: absent); read it, do not keep it."""
        return self._per_node

    def __contains__(self, uid: object) -> bool:
        return uid in self._by_uid

    def move(
        self, uid: str, stage: Stage, now: float, expires: float, resource_version: str = ""
    ) -> Reservation | None:
        """Put the reservation in `stage` (with `expires` for DECIDED, and the resourceVersion
        its Binding was sent for when given); None if there is none."""
        res = self._by_uid.get(uid)
        if res is None:
            return None
        rv = resource_version or res.resource_version
        moved = replace(
            res, stage=stage, expires=expires, landed_at=now, epoch=self._epoch, resource_version=rv
        )
        self._by_uid[uid] = moved
        self._landed.pop(uid, None)
        if stage is Stage.LANDED:
            self._landed[uid] = now
        return moved

    def awaits(self, uid: str, node: str, resource_version: str) -> bool:
        """Whether the pod's reservation is UNKNOWN, of that very Binding (kube-scheduler's
        retry may have made a new decision for the pod since)."""
        res = self._by_uid.get(uid)
        return (
            res is not None
            and res.stage is Stage.UNKNOWN
            and (res.node, res.resource_version) == (node, resource_version)
        )

    def outlived(self, uid: str, resource_version: str) -> bool:
        """Whether the pod, seen unbound at `resource_version`, has an UNKNOWN reservation whose
        Binding was sent for an earlier version: that Binding can no longer land."""
        res = self._by_uid.get(uid)
        if res is None or res.stage is not Stage.UNKNOWN:
            return False
        return later(resource_version, res.resource_version)

    def extend(self, uid: str, expires: float) -> None:
        """A DECIDED reservation's pod turned out real: its bind may take the full TTL."""
        res = self._by_uid.get(uid)
        if res is not None and res.stage is Stage.DECIDED and res.expires < expires:
            self._by_uid[uid] = replace(res, expires=expires)

    def due(self, now: float) -> list[Reservation]:
        """DECIDED reservations whose bind never came."""
        return [r for r in self._by_uid.values() if r.stage is Stage.DECIDED and r.expires <= now]

    def relisting(self) -> None:
        """A complete list of the pods starts: what lands from now on may not be in it."""
        self._epoch += 1

    def landed_before_relist(self) -> list[Reservation]:
        """LANDED reservations whose Binding came before the current relist started."""
        landed = (self._by_uid[uid] for uid in self._landed)
        return [r for r in landed if r.epoch < self._epoch]

    def oldest_unconfirmed(self) -> float | None:
        """When the longest-waiting landed Binding landed (clock), or None."""
        return next(iter(self._landed.values()), None)
