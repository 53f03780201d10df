"""The scheduler's only long-lived state: registered nodes, allocations, reservations.

Usage per card is kept incrementally: every pod event adds or removes that
one pod's share, so a filter never rescans all pods (HAMi rebuilds the whole
view on every filter). Reservations made at filter time count like
allocations until the pod's own annotations arrive through the watch; only a
decision no bind has taken up expires (hami.cache.reservations). What a pod is
counted as, and why the cache trusts what it bound over what is written later, is
hami.engine.trust; pods bound without an allocation of ours are counted as whole
cards (hami.engine.outside). This module owns the pods' states and their moves; the
nodes' side is hami.cache.nodes, what is counted on the cards hami.cache.counts.
"""

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from hami.cache.binds import BindStages
from hami.cache.counts import Counts
from hami.cache.dra import DraBook
from hami.cache.nodes import NodeStore, Read
from hami.cache.outside import OutsideBook
from hami.cache.quota import QuotaBook
from hami.cache.records import Distrust, EditIgnored, LockTable, PodRecords
from hami.cache.reservations import Reservation, Reservations
from hami.engine import nvidianames as nv
from hami.engine.dra.device import DRA_SPLIT
from hami.engine.families.registry import Families
from hami.engine.holders import held_cards, holder_types, planned_annotations
from hami.engine.inventory import PodAllocation, is_terminal
from hami.engine.model import DeviceInfo, NodeInventory, NodeState, PodDevices, Usage
from hami.engine.outside import OutsideClaim
from hami.engine.requests import ResourceDefaults
from hami.engine.state import held
from hami.engine.trust import asks_for_no_card, count, observe
from hami.engine.usage import pod_usage

# A node that has just gained free capacity: a pod gone, finished, or a reservation dropped.
Released = Callable[[str], None]


class ClusterCache:
    """The facts every decision reads: nodes and their cards, and what holds each card.

    What holds a pod's cards goes through these states, by pod uid (the shape of
    kube-scheduler's cache interface: assume, forget, expire, add, remove):

        unseen --reserve (filter)--> RESERVED (its stages: hami.cache.reservations, moved
                                               by binds and relists through `binds`)
        RESERVED --the watch shows its allocation (our Binding landed)--> COUNTED
        RESERVED --forget, expire, the pod deleted or finished or gone from a relist--> unseen
        unseen --a bound pod with an allocation of ours (a restart)--> COUNTED
        unseen --a bound pod asking for GPUs without one--> OUTSIDE (whole cards)
        COUNTED, OUTSIDE --the pod deleted or finished, gone from a relist--> unseen

    RESERVED and COUNTED hold the memory, cores and slots written; OUTSIDE, the cards the
    kubelet gives. An allocation on an unbound pod counts only while the node's lock names
    it; one edited after the bind is ignored (on_edit_ignored). Every change that frees cards
    calls on_release with the node. The stores: _nodes (hami.cache.nodes.NodeStore: each
    node's inventory, the sum per card, the node states, view), pods (_records: what each
    pod's annotations say; _counts, hami.cache.counts.Counts: COUNTED and, in its
    OutsideBook, OUTSIDE; _reservations: RESERVED), the sum per namespace (quotas); the
    node locks are read from `locks` (without it, no lock names any pod).
    """

    def __init__(
        self,
        clock: Callable[[], float],
        reservation_ttl: float = 120.0,
        gpu_resource: str = nv.GPU,
        *,
        resources: ResourceDefaults,
        unknown_pod_ttl: float = 5.0,
        on_distrust: Distrust | None = None,
        on_edit_ignored: EditIgnored | None = None,
        on_release: Released | None = None,
        quotas: QuotaBook | None = None,
        gfd_split: int = 0,
        locks: LockTable | None = None,
        families: Families,
        dra_split: int = DRA_SPLIT,
    ) -> None:
        self._clock = clock
        self._resources = resources
        # The device families this process schedules (its device config's): the services
        # holding the cache read them here, so that every one decodes the same names.
        self.families = families
        self._on_release = on_release
        # Namespace GPU quotas; usage is counted in Counts.account beside the cards'.
        self.quotas = quotas or QuotaBook(
            names=resources.names, memory_factor=resources.memory_factor, families=families
        )
        self._records = PodRecords(on_distrust, on_edit_ignored)
        self._locks = locks
        if locks is not None:
            locks.listen(self._lock_moved)
        self._reservations = Reservations(clock, reservation_ttl, unknown_pod_ttl)
        # What binds and relists tell about the decisions taken up (hami.cache.binds).
        self.binds = BindStages(self._reservations, clock, self.forget)
        # Counts mutates the pods OUTSIDE; the NodeStore reads them into the nodes' states.
        # The other device families' registrations and allocations are read beside NVIDIA's;
        # their cards are counted like NVIDIA's, outside NVIDIA's quotas (hami.engine.familyquota).
        self._outside = OutsideBook()
        self._families = families
        self._holder_types = holder_types(families)
        self._nodes = NodeStore(gpu_resource, gfd_split, families, self._outside)
        self._counts = Counts(self._nodes, self._outside, self.quotas, families)
        # What allocated DRA claims hold, on the same sums (fed by its own informers).
        self.dra = DraBook(
            self._counts.account,
            self._released,
            families.dra_drivers,
            claimed=self._claims_counted,
            moved=self._nodes.dra_touch,
            split=dra_split,
            unit_drivers=families.dra_unit_drivers,
        )
        # Theirs, read here directly: the pod side looks them up on every event.
        self._inventory = self._nodes.inventories
        self._allocations = self._counts.allocations
        self.unregistered: Mapping[str, str] = self._nodes.unregistered  # node -> why
        # node -> its labels, cordon and taints (hami.engine.nodeselect reads them)
        self.fences: Mapping[str, Mapping[str, Any]] = self._nodes.fences

    # --- nodes (their inventories and states: hami.cache.nodes) -------------

    def replace_nodes(self, nodes: Iterable[Mapping[str, Any]]) -> None:
        seen = set()
        for node in nodes:
            seen.add(self._upsert_node(node))
        for name in self._nodes.names():
            if name not in seen:
                self.delete_node({"metadata": {"name": name}})

    def upsert_node(self, node: Mapping[str, Any]) -> None:
        self._upsert_node(node)

    def _upsert_node(self, node: Mapping[str, Any]) -> str:
        if self._locks is not None:
            self._locks.seen(node)
        name, change = self._nodes.read(node)
        if change is Read.DROPPED:
            self._counts.forget_node(name)
            self._recount_node(name)
        elif change is Read.CHANGED:
            # Which cards exist, and which are in MIG mode, decide how its pods are counted.
            self._recount_node(name)
            # New or changed cards (registered, uncordoned, healthy again) may fit a waiting pod.
            self._released(name)
        return name

    def _lock_moved(self, node: str) -> None:
        # An unbound pod's allocation counts only while the lock names it.
        for uid in self._records.on(node):
            seen = self._records.get(uid)
            if seen is not None and not seen.bound_to:
                self._recount(uid)

    def inventory(self, node: str) -> NodeInventory | None:
        return self._inventory.get(node)

    def handshake(self, node: str, devices: PodDevices = ()) -> bool:
        """Whether a device plugin on `node` allocates `devices` through HAMi's node lock and
        bind phase: NVIDIA's unless its cards were read from GFD labels; another family's
        where its FamilyWire names HAMi's lock (the others take none, or their own)."""
        return self._nodes.handshake(node, devices)

    def family_cards(self, node: str) -> Mapping[str, tuple[DeviceInfo, ...]]:
        """The other families' cards registered on `node`, by type."""
        return self._nodes.family_cards(node)

    def delete_node(self, node: Mapping[str, Any]) -> bool:
        """Forget the node, unless it is an older object of that name (a Node deleted and made
        again while the watch was out of touch: the relist shows the new one, then deletes
        the old uid); whether it was forgotten."""
        meta = node.get("metadata") or {}
        name = str(meta.get("name", ""))
        if not self._nodes.current(name, str(meta.get("uid") or "")):
            return False
        if self._locks is not None:
            self._locks.gone(node)
        self._counts.forget_node(name)
        self._nodes.drop(name)
        self._recount_node(name)
        return True

    @property
    def view(self) -> Mapping[str, NodeState]:
        """Every registered node's state, as of every event applied so far."""
        return self._nodes.view

    def settle(self) -> None:
        """Build the states of the nodes changed since the last read, now rather than on the
        next read (after a list, when a first filter should not pay for every node)."""
        self._nodes.settle()

    # --- pods --------------------------------------------------------------

    def replace_pods(self, pods: Iterable[Mapping[str, Any]]) -> None:
        seen = set()
        for pod in pods:
            seen.add(str((pod.get("metadata") or {}).get("uid", "")))
            self.upsert_pod(pod)
        for uid in [u for u in self._records.uids() if u not in seen]:
            self._records.put(uid, None)
            self._released(self._counts.uncount(uid))
        for uid in [u for u in self._reservations.uids() if u not in seen]:
            self.forget(uid)
        self._reservations.known_only(seen)

    def upsert_pod(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        if not (pod.get("spec") or {}).get("nodeName") and self._reservations.outlived(
            uid, str(meta.get("resourceVersion") or "")
        ):
            self.forget(uid)  # a Binding of unknown outcome that can no longer land
        self._reservations.learn(uid, live=not is_terminal(pod))
        seen, edit = observe(pod, self._records.get(uid), self._resources, self.families)
        self._records.put(uid, seen)
        if seen is None:
            self._released(self._counts.uncount(uid))
            if is_terminal(pod):
                self.forget(uid)
            # Otherwise keep any reservation: the pod's events between filter
            # and bind carry no allocation yet.
            return
        self._records.edited(seen, edit)
        self._recount(uid)

    def _recount_node(self, node: str) -> None:
        for uid in self._records.on(node):
            self._recount(uid)

    def _recount(self, uid: str) -> None:
        """Count the pod as its record says, given its node as the cache has it now."""
        seen = self._records.get(uid)
        if seen is None:
            return
        node = seen.written.node if seen.written is not None else seen.bound_to
        counted = count(
            seen, self._nodes.share_bases(node), self._locks.holder(node) if self._locks else None
        )
        self._records.distrusted(seen, counted.problem)
        if counted.own is None and seen.bound_to:
            # Bound without an allocation of ours: whatever this scheduler held for it is free.
            self._released(self._drop_reservation(uid))
        was = self._allocations.get(uid) or self._outside.get(uid)
        if self._counts.holds(uid, counted):
            return
        left = self._counts.uncount(uid)
        if counted.own is not None:
            self._count_own(uid, counted.own)
        elif counted.outside is not None:
            self._counts.add_outside(counted.outside)
        if was is not None and (counted.own or counted.outside) is None:
            self._released(left)

    def _count_own(self, uid: str, alloc: PodAllocation) -> None:
        usage = held(alloc, self._nodes.mig(alloc.node))
        # The pod's own annotations are now the truth; the reservation has done its job. When
        # they say what it counted (the bind of this very decision), the count carries over:
        # rebuilding the node twice for no change is most of what a bound pod costs the cache.
        res = self._reservations.get(uid)
        carried = (
            res is not None
            and (res.node, res.namespace) == (alloc.node, alloc.namespace)
            and pod_usage(res.devices, res.n_init) == usage
        )
        if carried:
            self._reservations.pop(uid)
            self._nodes.unhold(alloc.node, (uid, True))
        else:
            self._drop_reservation(uid)
        self._counts.own(uid, alloc, usage, carried)

    def asks_for_no_gpu(self, pod: Mapping[str, Any]) -> bool:
        """hami.engine.trust.asks_for_no_card: bound by HAMi with no lock and no allocation."""
        return asks_for_no_card(pod, self._resources, self.families)

    def delete_pod(self, pod: Mapping[str, Any]) -> None:
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        self._records.put(uid, None)
        self._released(self._counts.uncount(uid))
        self.forget(uid)
        self._reservations.unknown(uid)

    def _released(self, node: str | None) -> None:
        if node is not None and self._on_release is not None:
            self._on_release(node)

    def allocation(self, uid: str) -> PodAllocation | None:
        return self._allocations.get(uid)

    def pods(self) -> Iterable[PodAllocation]:
        return self._allocations.values()

    def outside(self, node: str | None = None) -> Iterable[OutsideClaim]:
        """Bound pods holding GPUs without an allocation of ours (on `node`, or anywhere),
        each counted as the kubelet's whole cards."""
        return self._outside.claims(node)

    def claim(self, uid: str) -> OutsideClaim | None:
        return self._outside.get(uid)

    def outside_cards(self, node: str) -> Mapping[str, tuple[OutsideClaim, ...]]:
        """The cards of `node` those pods are counted on, by card."""
        return self._outside.cards(node)

    # --- reservations -------------------------------------------------------

    def reserve(
        self,
        uid: str,
        namespace: str,
        name: str,
        node: str,
        devices: PodDevices,
        n_init: int,
        until: float | None = None,
        containers: tuple[Mapping[str, Any], ...] = (),
        annotations: Mapping[str, str] | None = None,
        resource_version: str = "",
        claims: int = 0,
    ) -> Reservation:
        """Count the devices as the pod's until its allocation arrives or, while no bind has
        taken the decision up, its TTL runs out or `until` (a preemption's hold of freed
        cards) passes. `containers` (init first) are kept for the bind of a pod given other
        families' devices (Reservation.containers); `annotations` (the pod's) are what the
        families reading the holders of their cards see of it (hami.engine.holders);
        `resource_version` (the pod's, as filter saw it) is what its Binding is sent for;
        `claims`, the DRA placer's claims whose count takes over from it (Reservation.claims)."""
        self._drop_reservation(uid)
        expires = self._clock() + self._reservations.ttl_of(uid) if until is None else until
        res = Reservation(
            uid,
            namespace,
            name,
            node,
            devices,
            n_init,
            expires,
            containers=containers,
            resource_version=resource_version,
            claims=claims,
        )
        self._reservations.put(res)
        usage = pod_usage(devices, n_init)
        self._counts.account(node, namespace, usage, +1, self._counts.others(devices))
        held = held_cards(devices, self._holder_types)
        if held:
            planned = planned_annotations(annotations or {}, devices, self._families)
            self._nodes.hold(node, (uid, True), held, planned)
        return res

    def _claims_counted(self, uid: str) -> None:
        # Same call as the claim's count: the cards are never counted twice, nor dropped between.
        res = self._reservations.get(uid)
        if res is not None and 0 < res.claims <= self.dra.counted_for(uid):
            self.forget(uid)

    def dra_view(self) -> Mapping[str, NodeState]:
        """The nodes as the DRA placer places on them (hami.cache.nodes.NodeStore.dra_states)."""
        return self._nodes.dra_states(self.dra.devices)

    def reservation(self, uid: str) -> Reservation | None:
        return self._reservations.get(uid)

    def reserved_nodes(self) -> Mapping[str, int]:
        """How many decisions whose bind the watch has not shown yet each node has."""
        return self._reservations.nodes()

    def forget(self, uid: str) -> None:
        """Drop the pod's reservation: its cards are free for the next pod."""
        self._released(self._drop_reservation(uid))

    def _drop_reservation(self, uid: str) -> str | None:
        res = self._reservations.pop(uid)
        if res is None:
            return None
        usage = pod_usage(res.devices, res.n_init)
        self._counts.account(res.node, res.namespace, usage, -1, self._counts.others(res.devices))
        self._nodes.unhold(res.node, (uid, True))
        return res.node

    def release_unbound(self, uid: str) -> None:
        """Drop what a pod holds before it is placed again, so it never competes with itself.

        kube-scheduler filters a pod again after a failed bind; its earlier
        reservation, and any allocation annotated but never bound, must not
        count against the new decision.
        """
        # The pod itself is about to be placed again: nobody else needs telling.
        self._drop_reservation(uid)
        alloc = self._allocations.get(uid)
        if alloc is not None and not alloc.bound:
            self._counts.uncount(uid)

    def expire(self) -> list[Reservation]:
        """Drop decisions whose bind never came; returns them for logging."""
        stale = self._reservations.due(self._clock())
        for r in stale:
            self.forget(r.uid)
        return stale

    def usage(self) -> Mapping[str, Mapping[str, Usage]]:
        return self._nodes.usage()

    def overcommitted(self, node: str, devices: PodDevices) -> list[str]:
        """`<uuid> (<why>)` for each of the node's cards that, with what is counted on it now
        (this pod's share among it), has no room for the pod's `devices` after all, by the
        rule its family's fit placed them by (hami.engine.recheck.overfull)."""
        return self._nodes.overcommitted(node, devices)
