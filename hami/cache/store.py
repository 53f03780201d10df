"""The scheduler's only long-lived state: registered nodes, allocations, reservations.

Usage per card is kept incrementally: every pod event adds or removes that
one pod's share, so a filter never rescans all pods (HAMi rebuilds the whole
view on every filter). Reservations made at filter time count like
allocations until the pod's own annotations arrive through the watch, and
expire if no bind follows.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from hami.cache.quota import QuotaBook
from hami.engine.inventory import (
    NodeInventory,
    PodAllocation,
    Unregistered,
    inventory_key,
    is_terminal,
    node_inventory,
    pod_allocation,
)
from hami.engine.model import NodeState, PodDevices, Usage
from hami.engine.quota import card_total
from hami.engine.requests import RequestError, ResourceDefaults, pod_request
from hami.engine.state import build_node, held, mig_cards, pod_usage
from hami.engine.vetting import Vetted, vet_allocation

# (namespace, name, why): an allocation annotation the cache did not count as written.
Distrust = Callable[[str, str, str], None]
# A node that has just gained free capacity: a pod gone, finished, or a reservation dropped.
Released = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Reservation:
    uid: str
    namespace: str
    name: str
    node: str
    devices: PodDevices
    n_init: int
    expires: float


class ClusterCache:
    def __init__(
        self,
        clock: Callable[[], float],
        reservation_ttl: float = 120.0,
        gpu_resource: str = "nvidia.com/gpu",
        *,
        resources: ResourceDefaults = ResourceDefaults(),
        unknown_pod_ttl: float = 5.0,
        on_distrust: Distrust | None = None,
        on_release: Released | None = None,
        quotas: QuotaBook | None = None,
        gfd_split: int = 0,
    ) -> None:
        self._clock = clock
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
        self._on_distrust = on_distrust
        self._on_release = on_release
        # Namespace GPU quotas; usage is counted in _account beside the cards'.
        self.quotas = quotas or QuotaBook(resources.names, resources.memory_factor)
        self._known: set[str] = set()  # uids of the live pods the watch has shown
        self._distrusted: dict[str, PodAllocation] = {}  # as written, reported once
        self._inventory: dict[str, NodeInventory] = {}
        # node -> what its inventory was read from (hami.engine.inventory.inventory_key)
        self._node_keys: dict[str, tuple[Any, ...]] = {}
        self.unregistered: dict[str, str] = {}  # node -> why, for explaining rejections
        self._pods: dict[str, PodAllocation] = {}
        self._pod_usage: dict[str, dict[str, Usage]] = {}
        self._reservations: dict[str, Reservation] = {}
        self._usage: dict[str, dict[str, Usage]] = {}  # node -> uuid -> usage
        self._states: dict[str, NodeState] = {}
        self.view: Mapping[str, NodeState] = MappingProxyType(self._states)

    # --- nodes -----------------------------------------------------------

    def replace_nodes(self, nodes: Iterable[Mapping[str, Any]]) -> None:
        seen = set()
        for node in nodes:
            seen.add(self._upsert_node(node))
        for name in [*self._inventory, *self.unregistered]:
            if name not in seen:
                self._drop_node(name)

    def upsert_node(self, node: Mapping[str, Any]) -> None:
        self._upsert_node(node)

    def _upsert_node(self, node: Mapping[str, Any]) -> str:
        key = inventory_key(node, self._gpu_resource, self._gfd_split)
        name = str(key[0] or "")
        if self._node_keys.get(name) == key:
            return name
        self._node_keys[name] = key
        inv = node_inventory(node, self._gpu_resource, self._gfd_split)
        if isinstance(inv, Unregistered):
            self._drop_node(inv.name)
            self.unregistered[inv.name] = inv.why
            self._node_keys[name] = key
            return inv.name
        self.unregistered.pop(inv.name, None)
        if self._inventory.get(inv.name) != inv:
            was = mig_cards(self._states.get(inv.name))
            self._inventory[inv.name] = inv
            self._rebuild(inv.name)
            if mig_cards(self._states.get(inv.name)) != was:
                self._recount(inv.name)
            # New or changed cards (registered, uncordoned, healthy again) may fit a waiting pod.
            self._released(inv.name)
        return inv.name

    def handshake(self, node: str) -> bool:
        """Whether a device plugin on `node` allocates through HAMi's node lock and bind phase."""
        inv = self._inventory.get(node)
        return inv is None or inv.handshake

    def delete_node(self, node: Mapping[str, Any]) -> None:
        self._drop_node(str((node.get("metadata") or {}).get("name", "")))

    def _drop_node(self, name: str) -> None:
        self._node_keys.pop(name, None)
        self._inventory.pop(name, None)
        self._states.pop(name, None)
        self.unregistered.pop(name, None)

    def _rebuild(self, name: str) -> None:
        inv = self._inventory.get(name)
        if inv is None:
            return
        usage = self._usage.get(name, {})
        self._states[name] = build_node(name, inv.devices, usage, inv.cordoned, inv.links)

    # --- usage bookkeeping ------------------------------------------------

    def _account(self, node: str, namespace: str, usage: Mapping[str, Usage], sign: int) -> None:
        if sign > 0:
            self.quotas.add(namespace, card_total(usage))
        else:
            self.quotas.remove(namespace, card_total(usage))
        per_card = self._usage.setdefault(node, {})
        for uuid, u in usage.items():
            total = per_card.get(uuid, Usage()) + u if sign > 0 else per_card.get(uuid, Usage()) - u
            if total.empty:
                per_card.pop(uuid, None)
            else:
                per_card[uuid] = total
        self._rebuild(node)

    def _recount(self, node: str) -> None:
        """Count the node's pods again: which of its cards are in MIG mode changed, and with
        it what a pod holding one without a MIG allocation means (hami.engine.mig)."""
        for uid in [u for u, a in self._pods.items() if a.node == node]:
            alloc = self._pods[uid]
            self._account(node, alloc.namespace, self._pod_usage[uid], -1)
            self._pod_usage[uid] = held(alloc, mig_cards(self._states.get(node)))
            self._account(node, alloc.namespace, self._pod_usage[uid], +1)

    # --- pods --------------------------------------------------------------

    def replace_pods(self, pods: Iterable[Mapping[str, Any]]) -> None:
        seen = set()
        for pod in pods:
            seen.add(str((pod.get("metadata") or {}).get("uid", "")))
            self.upsert_pod(pod)
        for uid in [u for u in self._pods if u not in seen]:
            self._released(self._remove_pod(uid))
        for uid in [u for u in self._reservations if u not in seen]:
            self.forget(uid)
        self._known &= seen
        for uid in [u for u in self._distrusted if u not in seen]:
            del self._distrusted[uid]

    def upsert_pod(self, pod: Mapping[str, Any]) -> None:
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        self._learn(uid, live=not is_terminal(pod))
        alloc = self.vetted(pod)
        if alloc is None:
            self._released(self._remove_pod(uid))
            if is_terminal(pod):
                self.forget(uid)
            # Otherwise keep any reservation: the pod's events between filter
            # and bind carry no allocation yet.
            return
        if self._pods.get(uid) == alloc:
            return
        self._remove_pod(uid)
        usage = held(alloc, mig_cards(self._states.get(alloc.node)))
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
            del self._reservations[uid]
            return
        self._drop_reservation(uid)
        self._account(alloc.node, alloc.namespace, usage, +1)

    def asks_for_no_gpu(self, pod: Mapping[str, Any]) -> bool:
        """True for a pod that names a GPU resource but asks for no card (`nvidia.com/gpu: 0`
        beside a gpumem) and carries no allocation: HAMi lets such a pod through filter and
        bind without one. A pod that names no GPU resource is never sent to the extender, and
        one carrying an allocation that did not add up is no decision of ours."""
        if pod_allocation(pod) is not None:
            return False
        spec = pod.get("spec") or {}
        n = self._resources.names
        ours = (n.gpu, n.memory, n.memory_percentage, n.cores)
        named = any(
            name in ((c.get("resources") or {}).get(section) or {})
            for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
            for section in ("limits", "requests")
            for name in ours
        )
        try:
            return named and not pod_request(spec, self._resources).wants_gpu
        except RequestError:
            return False

    def vetted(self, pod: Mapping[str, Any]) -> PodAllocation | None:
        """The pod's allocation as far as it adds up (hami.engine.vetting), or None."""
        alloc = pod_allocation(pod)
        if alloc is None:
            return None
        spec = pod.get("spec") or {}
        inv = self._inventory.get(alloc.node)
        try:
            request = pod_request(spec, self._resources)
        except RequestError as e:
            verdict = Vetted(None, str(e))
        else:
            verdict = vet_allocation(
                alloc,
                str(spec.get("nodeName") or ""),
                request,
                {d.id: d.share_base for d in inv.devices} if inv is not None else {},
            )
        if not verdict.problem:
            self._distrusted.pop(alloc.uid, None)
        elif self._distrusted.get(alloc.uid) != alloc:
            self._distrusted[alloc.uid] = alloc
            if self._on_distrust is not None:
                self._on_distrust(alloc.namespace, alloc.name, verdict.problem)
        return verdict.allocation

    def _learn(self, uid: str, live: bool) -> None:
        if not live:
            self._known.discard(uid)
            return
        if uid in self._known:
            return
        self._known.add(uid)
        res = self._reservations.get(uid)
        if res is not None:
            # The pod is real after all: its decision may wait for its bind the full TTL.
            self._reservations[uid] = replace(
                res, expires=max(res.expires, self._clock() + self._ttl)
            )

    def delete_pod(self, pod: Mapping[str, Any]) -> None:
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        self._released(self._remove_pod(uid))
        self.forget(uid)
        self._known.discard(uid)
        self._distrusted.pop(uid, None)

    def _remove_pod(self, uid: str) -> str | None:
        """Uncount the pod's allocation; the node it was on, if any."""
        alloc = self._pods.pop(uid, None)
        if alloc is None:
            return None
        self._account(alloc.node, alloc.namespace, self._pod_usage.pop(uid), -1)
        return alloc.node

    def _released(self, node: str | None) -> None:
        if node is not None and self._on_release is not None:
            self._on_release(node)

    def allocation(self, uid: str) -> PodAllocation | None:
        return self._pods.get(uid)

    def pods(self) -> Iterable[PodAllocation]:
        return self._pods.values()

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
    ) -> Reservation:
        """Count the devices as the pod's until its allocation arrives, its TTL runs out, or
        `until` (a preemption's hold of freed cards) passes."""
        self._drop_reservation(uid)
        ttl = self._ttl if uid in self._known else self._unknown_ttl
        expires = self._clock() + ttl if until is None else until
        res = Reservation(uid, namespace, name, node, devices, n_init, expires)
        self._reservations[uid] = res
        self._account(node, namespace, pod_usage(devices, n_init), +1)
        return res

    def reservation(self, uid: str) -> Reservation | None:
        return self._reservations.get(uid)

    def forget(self, uid: str) -> None:
        """Drop the pod's reservation: its cards are free for the next pod."""
        self._released(self._drop_reservation(uid))

    def _drop_reservation(self, uid: str) -> str | None:
        res = self._reservations.pop(uid, None)
        if res is None:
            return None
        self._account(res.node, res.namespace, pod_usage(res.devices, res.n_init), -1)
        return res.node

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
            self._remove_pod(uid)

    def expire(self) -> list[Reservation]:
        """Drop reservations whose bind never came; returns them for logging."""
        now = self._clock()
        stale = [r for r in self._reservations.values() if r.expires <= now]
        for r in stale:
            self.forget(r.uid)
        return stale

    def usage(self) -> Mapping[str, Mapping[str, Usage]]:
        return self._usage

    def overcommitted(self, node: str, uuids: Iterable[str]) -> list[str]:
        """Those of the node's cards `uuids` whose counted use (allocations and reservations)
        exceeds their memory, cores or split count."""
        state = self._states.get(node)
        wanted = set(uuids)
        return [
            c.info.id
            for c in (state.cards if state is not None else ())
            if c.info.id in wanted
            and (
                c.usage.usedmem > c.info.devmem
                or c.usage.usedcores > c.info.devcore
                or c.usage.used > c.info.count
            )
        ]
