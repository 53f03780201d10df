"""The scheduler's only long-lived state: registered nodes, allocations, reservations.

Usage per card is kept incrementally: every pod event adds or removes that
one pod's share, so a filter never rescans all pods (HAMi rebuilds the whole
view on every filter). Reservations made at filter time count like
allocations until the pod's own annotations arrive through the watch; only a
decision no bind has taken up expires (hami.cache.reservations). What a pod is counted as, and why the cache trusts
what it bound over what is written later, is hami.engine.trust; pods bound
without an allocation of ours are counted as whole cards (hami.engine.outside).
"""

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from hami.cache.outside import OutsideBook
from hami.cache.quota import QuotaBook
from hami.cache.records import Distrust, EditIgnored, LockTable, PodRecords
from hami.cache.reservations import Reservation, Reservations, Stage
from hami.engine.checks import no_room
from hami.engine.families.registry import FAMILIES, Families
from hami.engine.familyquota import card_amounts
from hami.engine.inventory import (
    NodeInventory,
    PodAllocation,
    Unregistered,
    family_of,
    inventory_key,
    is_terminal,
    node_inventory,
    split_devices,
)
from hami.engine.mig import pod_instances
from hami.engine.model import DeviceInfo, NodeState, PodDevices, Usage
from hami.engine.names import NODE_LOCK
from hami.engine.outside import OutsideClaim
from hami.engine.quota import card_total
from hami.engine.requests import ResourceDefaults
from hami.engine.state import build_node, held, mig_devices, pod_usage
from hami.engine.trust import Counted, asks_for_no_card, count, observe

# A node that has just gained free capacity: a pod gone, finished, or a reservation dropped.
Released = Callable[[str], None]


class ClusterCache:
    """The facts every decision reads: nodes and their cards, and what holds each card.

    What holds a pod's cards goes through these states, by pod uid (the shape of
    kube-scheduler's cache interface: assume, forget, expire, add, remove):

        unseen --reserve (filter)--> RESERVED (its stages: hami.cache.reservations)
        RESERVED --the watch shows its allocation (our Binding landed)--> COUNTED
        RESERVED --forget, expire, the pod deleted or finished or gone from a relist--> unseen
        unseen --a bound pod with an allocation of ours (a restart)--> COUNTED
        unseen --a bound pod asking for GPUs without one--> OUTSIDE (whole cards)
        COUNTED, OUTSIDE --the pod deleted or finished, gone from a relist--> unseen

    RESERVED and COUNTED hold the memory, cores and slots written; OUTSIDE, the cards the
    kubelet gives. An allocation on an unbound pod counts only while the node's lock names
    it; one edited after the bind is ignored (on_edit_ignored). Every change that frees cards
    calls on_release with the node. The stores: nodes (_inventory, _states, view), pods
    (_records: what each pod's annotations say; _pods and _pod_usage: COUNTED; _outside:
    OUTSIDE; _reservations: RESERVED), their sum per card (_usage) and per namespace
    (quotas); the node locks are read from `locks` (without it, no lock names any pod).
    """

    def __init__(
        self,
        clock: Callable[[], float],
        reservation_ttl: float = 120.0,
        gpu_resource: str = "nvidia.com/gpu",
        *,
        resources: ResourceDefaults = ResourceDefaults(),
        unknown_pod_ttl: float = 5.0,
        on_distrust: Distrust | None = None,
        on_edit_ignored: EditIgnored | None = None,
        on_release: Released | None = None,
        quotas: QuotaBook | None = None,
        gfd_split: int = 0,
        locks: LockTable | None = None,
        families: Families = FAMILIES,
    ) -> None:
        self._clock = clock
        # The other device families whose registrations and allocations are read beside
        # NVIDIA's; their cards are counted like NVIDIA's, outside the NVIDIA quotas (in
        # their own: hami.engine.familyquota).
        self._families = families
        self._family_types = families.types()
        # > 0: nodes without HAMi's registration are read from their GFD labels, each card
        # shared by this many tasks (hami.engine.gfd).
        self._gfd_split = gfd_split
        self._ttl = reservation_ttl
        # A filter for a pod the watch has not shown (yet) holds its cards this long only:
        # kube-scheduler filters pods it learnt of through its own watch, so ours sees them
        # within moments, and made-up pods must not fence cards off for the full TTL.
        self._unknown_ttl = min(unknown_pod_ttl, reservation_ttl)
        self._gpu_resource = gpu_resource
        self._resources = resources
        self._on_release = on_release
        # Namespace GPU quotas; usage is counted in _account beside the cards'.
        self.quotas = quotas or QuotaBook(
            resources.names, resources.memory_factor, families=families
        )
        self._known: set[str] = set()  # uids of the live pods the watch has shown
        self._records = PodRecords(on_distrust, on_edit_ignored)
        self._inventory: dict[str, NodeInventory] = {}
        # node -> what its inventory was read from (hami.engine.inventory.inventory_key)
        self._node_keys: dict[str, tuple[Any, ...]] = {}
        self._node_uids: dict[str, str] = {}  # node -> uid of the Node object it was read from
        self._locks = locks
        if locks is not None:
            locks.listen(self._lock_moved)
        self.unregistered: dict[str, str] = {}  # node -> why, for explaining rejections
        self._pods: dict[str, PodAllocation] = {}  # counted as allocations of ours
        self._pod_usage: dict[str, dict[str, Usage]] = {}
        self._outside = OutsideBook()  # counted as the kubelet's whole cards
        self._reservations = Reservations()
        self._usage: dict[str, dict[str, Usage]] = {}  # node -> uuid -> usage
        self._states: dict[str, NodeState] = {}
        # Nodes whose usage or cards changed since their state was built: built when next read,
        # so a node gaining a thousand pods in one LIST is built once, not a thousand times.
        self._stale: set[str] = set()
        self._view: Mapping[str, NodeState] = MappingProxyType(self._states)

    # --- nodes -----------------------------------------------------------

    def replace_nodes(self, nodes: Iterable[Mapping[str, Any]]) -> None:
        seen = set()
        for node in nodes:
            seen.add(self._upsert_node(node))
        for name in [*self._inventory, *self.unregistered]:
            if name not in seen:
                self.delete_node({"metadata": {"name": name}})

    def upsert_node(self, node: Mapping[str, Any]) -> None:
        self._upsert_node(node)

    def _upsert_node(self, node: Mapping[str, Any]) -> str:
        meta = node.get("metadata") or {}
        self._node_uids[str(meta.get("name", ""))] = str(meta.get("uid") or "")
        if self._locks is not None:
            self._locks.seen(node)
        key = inventory_key(node, self._gpu_resource, self._gfd_split, self._families)
        name = str(key[0] or "")
        if self._node_keys.get(name) == key:
            return name
        self._node_keys[name] = key
        inv = node_inventory(node, self._gpu_resource, self._gfd_split, self._families)
        if isinstance(inv, Unregistered):
            if inv.name in self._inventory:
                self._drop_node(inv.name)
                self._recount_node(inv.name)
            self.unregistered[inv.name] = inv.why
            self._node_keys[name] = key
            return inv.name
        self.unregistered.pop(inv.name, None)
        if self._inventory.get(inv.name) != inv:
            self._inventory[inv.name] = inv
            self._rebuild(inv.name)
            # Which cards exist, and which are in MIG mode, decide how its pods are counted.
            self._recount_node(inv.name)
            # New or changed cards (registered, uncordoned, healthy again) may fit a waiting pod.
            self._released(inv.name)
        return inv.name

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
        inv = self._inventory.get(node)
        nvidia = inv is None or inv.handshake
        if not self._family_types:
            return nvidia
        ours, others = split_devices(devices, self._families)
        if not others:
            return nvidia
        by_type = self._families.by_type()
        return (nvidia and any(ours)) or any(
            by_type[kind].wire.lock_name == NODE_LOCK for kind in others
        )

    def family_cards(self, node: str) -> Mapping[str, tuple[DeviceInfo, ...]]:
        """The other families' cards registered on `node`, by type."""
        inv = self._inventory.get(node)
        return {} if inv is None else dict(inv.families)

    def delete_node(self, node: Mapping[str, Any]) -> bool:
        """Forget the node, unless it is an older object of that name (a Node deleted and made
        again while the watch was out of touch: the relist shows the new one, then deletes
        the old uid); whether it was forgotten."""
        meta = node.get("metadata") or {}
        name, uid = str(meta.get("name", "")), str(meta.get("uid") or "")
        if uid and self._node_uids.get(name, uid) != uid:
            return False
        self._node_uids.pop(name, None)
        if self._locks is not None:
            self._locks.gone(node)
        self._drop_node(name)
        self._recount_node(name)
        return True

    def _drop_node(self, name: str) -> None:
        self._outside.forget_node(name)
        self._node_keys.pop(name, None)
        self._inventory.pop(name, None)
        self._states.pop(name, None)
        self._stale.discard(name)
        self.unregistered.pop(name, None)

    @property
    def view(self) -> Mapping[str, NodeState]:
        """Every registered node's state, as of every event applied so far."""
        self.settle()
        return self._view

    def settle(self) -> None:
        """Build the states of the nodes changed since the last read, now rather than on the
        next read (after a list, when a first filter should not pay for every node)."""
        for name in self._stale:
            self._build(name)
        self._stale.clear()

    def _state(self, name: str) -> NodeState | None:
        if name in self._stale:
            self._stale.discard(name)
            self._build(name)
        return self._states.get(name)

    def _mig(self, name: str) -> frozenset[str]:
        inv = self._inventory.get(name)
        return frozenset() if inv is None else mig_devices(inv.devices)

    def _rebuild(self, name: str) -> None:
        self._stale.add(name)

    def _build(self, name: str) -> None:
        inv = self._inventory.get(name)
        if inv is None:
            return
        usage: Mapping[str, Usage] = self._usage.get(name, {})
        usage = self._outside.usage(name, inv.devices, usage, inv.families)
        self._states[name] = build_node(
            name,
            inv.devices,
            usage,
            inv.cordoned,
            inv.links,
            self._states.get(name),
            inv.families,
        )

    # --- usage bookkeeping ------------------------------------------------

    def _account(
        self,
        node: str,
        namespace: str,
        usage: Mapping[str, Usage],
        sign: int,
        family_cards: frozenset[str] = frozenset(),
    ) -> None:
        """Add (sign > 0) or remove one pod's usage; `family_cards` are the cards of other
        families among it, which NVIDIA's quotas do not count."""
        quoted = usage if not family_cards else {
            k: u for k, u in usage.items() if k not in family_cards
        }
        if sign > 0:
            self.quotas.add(namespace, card_total(quoted))
        else:
            self.quotas.remove(namespace, card_total(quoted))
        if family_cards:
            # The families' own quotas count them, by their memory and core resources.
            owner = {c.id: kind for kind, cards in self.family_cards(node).items() for c in cards}
            held = {k: (owner[k], u.usedmem, u.usedcores) for k, u in usage.items() if k in owner}
            self.quotas.add_families(namespace, card_amounts(held, self._families), sign)
        per_card = self._usage.setdefault(node, {})
        for uuid, u in usage.items():
            total = per_card.get(uuid, Usage()) + u if sign > 0 else per_card.get(uuid, Usage()) - u
            if total.empty:
                per_card.pop(uuid, None)
            else:
                per_card[uuid] = total
        self._rebuild(node)

    # --- pods --------------------------------------------------------------

    def replace_pods(self, pods: Iterable[Mapping[str, Any]]) -> None:
        seen = set()
        for pod in pods:
            seen.add(str((pod.get("metadata") or {}).get("uid", "")))
            self.upsert_pod(pod)
        for uid in [u for u in self._records.uids() if u not in seen]:
            self._records.put(uid, None)
            self._released(self._uncount(uid))
        for uid in [u for u in self._reservations.uids() if u not in seen]:
            self.forget(uid)
        self._known &= seen

    def upsert_pod(self, pod: Mapping[str, Any]) -> None:
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        self._learn(uid, live=not is_terminal(pod))
        seen, edit = observe(pod, self._records.get(uid), self._resources)
        self._records.put(uid, seen)
        if seen is None:
            self._released(self._uncount(uid))
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
        inv = self._inventory.get(node)
        devmem = {d.id: d.share_base for d in inv.all_devices()} if inv is not None else None
        counted = count(seen, devmem, self._locks.holder(node) if self._locks else None)
        self._records.distrusted(seen, counted.problem)
        if counted.own is None and seen.bound_to:
            # Bound without an allocation of ours: whatever this scheduler held for it is free.
            self._released(self._drop_reservation(uid))
        was = self._pods.get(uid) or self._outside.get(uid)
        if self._counts(uid, counted):
            return
        left = self._uncount(uid)
        if counted.own is not None:
            self._count_own(uid, counted.own)
        elif counted.outside is not None:
            self._outside.add(counted.outside)
            self._rebuild(counted.outside.node)
        if was is not None and (counted.own or counted.outside) is None:
            self._released(left)

    def _count_own(self, uid: str, alloc: PodAllocation) -> None:
        usage = held(alloc, self._mig(alloc.node))
        self._pods[uid] = alloc
        self._pod_usage[uid] = usage
        # The pod's own annotations are now the truth; the reservation has done its job. When
        # they say what it counted (the bind of this very decision), the count carries over:
        # rebuilding the node twice for no change is most of what a bound pod costs the cache.
        res = self._reservations.get(uid)
        if (
            res is not None
            and (res.node, res.namespace) == (alloc.node, alloc.namespace)
            and pod_usage(res.devices, res.n_init) == usage
        ):
            self._reservations.pop(uid)
            return
        self._drop_reservation(uid)
        self._account(alloc.node, alloc.namespace, usage, +1, _cards(alloc.family_devices))

    def _counts(self, uid: str, counted: Counted) -> bool:
        """Whether the pod is counted so already (on cards as their MIG modes stand)."""
        if counted.outside is not None:
            return self._outside.get(uid) == counted.outside
        if counted.own is None:
            return uid not in self._pods and self._outside.get(uid) is None
        alloc = counted.own
        return self._pods.get(uid) == alloc and self._pod_usage[uid] == held(
            alloc, self._mig(alloc.node)
        )

    def asks_for_no_gpu(self, pod: Mapping[str, Any]) -> bool:
        """hami.engine.trust.asks_for_no_card: bound by HAMi with no lock and no allocation."""
        return asks_for_no_card(pod, self._resources)

    def _learn(self, uid: str, live: bool) -> None:
        if not live:
            self._known.discard(uid)
            return
        if uid in self._known:
            return
        self._known.add(uid)
        # The pod is real after all: its decision may wait for its bind the full TTL.
        self._reservations.extend(uid, self._clock() + self._ttl)

    def delete_pod(self, pod: Mapping[str, Any]) -> None:
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        self._records.put(uid, None)
        self._released(self._uncount(uid))
        self.forget(uid)
        self._known.discard(uid)

    def _uncount(self, uid: str) -> str | None:
        """Uncount what the pod holds; the node it was on, if any."""
        claim = self._outside.remove(uid)
        if claim is not None:
            self._rebuild(claim.node)
            return claim.node
        alloc = self._pods.pop(uid, None)
        if alloc is None:
            return None
        usage = self._pod_usage.pop(uid)
        self._account(alloc.node, alloc.namespace, usage, -1, _cards(alloc.family_devices))
        return alloc.node

    def _released(self, node: str | None) -> None:
        if node is not None and self._on_release is not None:
            self._on_release(node)

    def allocation(self, uid: str) -> PodAllocation | None:
        return self._pods.get(uid)

    def pods(self) -> Iterable[PodAllocation]:
        return self._pods.values()

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
    ) -> Reservation:
        """Count the devices as the pod's until its allocation arrives or, while no bind has
        taken the decision up, its TTL runs out or `until` (a preemption's hold of freed
        cards) passes. `containers` (init first) are kept for the bind of a pod given other
        families' devices (Reservation.containers)."""
        self._drop_reservation(uid)
        expires = self._clock() + self._ttl_of(uid) if until is None else until
        res = Reservation(
            uid, namespace, name, node, devices, n_init, expires, containers=containers
        )
        self._reservations.put(res)
        self._account(node, namespace, pod_usage(devices, n_init), +1, self._others(devices))
        return res

    def _ttl_of(self, uid: str) -> float:
        """How long a decision for the pod waits for its bind: less for one the watch never
        showed (see _unknown_ttl)."""
        return self._ttl if uid in self._known else self._unknown_ttl

    def reservation(self, uid: str) -> Reservation | None:
        return self._reservations.get(uid)

    def reserved_nodes(self) -> Counter[str]:
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
        self._account(res.node, res.namespace, usage, -1, self._others(res.devices))
        return res.node

    def _others(self, devices: PodDevices) -> frozenset[str]:
        """The cards of other families than NVIDIA's among `devices`."""
        if not self._family_types:
            return frozenset()
        types = self._family_types
        return frozenset(d.uuid for c in devices for d in c if family_of(d, types))

    def release_unbound(self, uid: str) -> None:
        """Drop what a pod holds before it is placed again, so it never competes with itself.

        kube-scheduler filters a pod again after a failed bind; its earlier
        reservation, and any allocation annotated but never bound, must not
        count against the new decision.
        """
        # The pod itself is about to be placed again: nobody else needs telling.
        self._drop_reservation(uid)
        alloc = self._pods.get(uid)
        if alloc is not None and not alloc.bound:
            self._uncount(uid)

    def expire(self) -> list[Reservation]:
        """Drop decisions whose bind never came; returns them for logging."""
        stale = self._reservations.due(self._clock())
        for r in stale:
            self.forget(r.uid)
        return stale

    def bind_started(self, uid: str) -> None:
        """A bind took the pod's decision up: its cards stay counted until it ends."""
        self._reservations.move(uid, Stage.BINDING, self._clock(), float("inf"))

    def bind_landed(self, uid: str) -> None:
        """The pod's Binding landed, or may have (its outcome is unknown): its cards stay
        counted until the watch shows the pod bound or gone, however long that takes."""
        self._reservations.move(uid, Stage.LANDED, self._clock(), float("inf"))

    def bind_failed(self, uid: str) -> None:
        """The bind did not land: the decision waits for kube-scheduler's next try as any does."""
        now = self._clock()
        self._reservations.move(uid, Stage.DECIDED, now, now + self._ttl_of(uid))

    def relisting(self) -> None:
        """A complete list of the pods starts (hami.kube.informer calls it)."""
        self._reservations.relisting()

    def relisted(self) -> None:
        """The list that started at relisting() is complete. A Binding that landed before it
        started and is still unconfirmed did not land after all (the pod is unbound) or its
        pod is gone (created, bound and deleted while the watch was out of touch)."""
        for res in self._reservations.landed_before_relist():
            self.forget(res.uid)

    def unconfirmed_since(self) -> float | None:
        """When (clock) the longest-waiting Binding the watch has not yet shown landed."""
        return self._reservations.oldest_unconfirmed()

    def usage(self) -> Mapping[str, Mapping[str, Usage]]:
        return self._usage

    def overcommitted(self, node: str, devices: PodDevices) -> list[str]:
        """`<uuid> (<why>)` for each of the node's cards that, with what is counted on it now
        (this pod's share among it), has no room for the pod's `devices` after all, by the
        rule /filter places by (hami.engine.checks.no_room)."""
        state = self._state(node)
        own = pod_instances(devices)
        wanted = {d.uuid for c in devices for d in c}
        out = []
        for c in () if state is None else state.all_cards():
            why = no_room(c, own.get(c.info.id, ())) if c.info.id in wanted else None
            if why is not None:
                out.append(f"{c.info.id} ({why})")
        return out


def _cards(devices: PodDevices) -> frozenset[str]:
    return frozenset(d.uuid for c in devices for d in c)
