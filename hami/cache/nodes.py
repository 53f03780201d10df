"""The node side of the cluster cache (hami.cache.store.ClusterCache owns one NodeStore).

It owns every registered node's inventory (and what it was read from, and the uid of the
Node object), why each other node is not registered, the usage counted on each card, and
the node states built from them. A state is built lazily: a node whose usage or cards
changed is marked stale and built when next read, so a node gaining a thousand pods in one
LIST is built once, not a thousand times. What is counted on the cards, and when, is the
pod side's business (ClusterCache); it reads the pods outside the scheduler from the
OutsideBook it is given.
"""

from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from types import MappingProxyType
from typing import Any

from hami.cache.outside import OutsideBook
from hami.engine.dra.device import DraDevice
from hami.engine.dra.slices import dra_inventory
from hami.engine.families.registry import Families
from hami.engine.holders import Pairs, card_holders
from hami.engine.inventory import inventory_key, node_inventory, split_devices
from hami.engine.model import DeviceInfo, NodeInventory, NodeState, PodDevices, Unregistered, Usage
from hami.engine.names import NODE_LOCK
from hami.engine.recheck import overfull
from hami.engine.state import build_node, mig_devices


class Read(Enum):
    """What reading a Node object changed."""

    SAME = "same"  # nothing the cache counts by
    DROPPED = "dropped"  # a registered node lost its registration
    UNREGISTERED = "unregistered"  # still (or newly) not registered
    CHANGED = "changed"  # new or changed cards


class NodeStore:
    """Each node's inventory, usage per card and state (see the module)."""

    def __init__(
        self, gpu_resource: str, gfd_split: int, families: Families, outside: OutsideBook
    ) -> None:
        self._gpu_resource = gpu_resource
        # > 0: nodes without HAMi's registration are read from their GFD labels, each card
        # shared by this many tasks (hami.engine.gfd).
        self._gfd_split = gfd_split
        self._families = families
        self._family_types = families.other_types()
        self._outside = outside
        self._inventory: dict[str, NodeInventory] = {}
        # node -> (its cards' DeviceInfo.share_base by id, its NVIDIA cards in MIG mode): what
        # counting each of its pods reads, made once per inventory rather than once per pod.
        self._per_pod: dict[str, tuple[Mapping[str, int], frozenset[str]]] = {}
        # Read-only to the pod side, which looks a node's cards up on every pod event.
        self.inventories: Mapping[str, NodeInventory] = self._inventory
        # node -> what its inventory was read from (hami.engine.inventory.inventory_key)
        self._node_keys: dict[str, tuple[Any, ...]] = {}
        self._node_uids: dict[str, str] = {}  # node -> uid of the Node object it was read from
        # node -> what kube-scheduler's own node checks read of it (hami.engine.nodeselect):
        # the DRA placer chooses only among the nodes the pod could be bound to.
        self._fences: dict[str, Mapping[str, Any]] = {}
        self.fences: Mapping[str, Mapping[str, Any]] = self._fences
        self.unregistered: dict[str, str] = {}  # node -> why, for explaining rejections
        self._usage: dict[str, dict[str, Usage]] = {}  # node -> uuid -> usage
        # node -> (pod uid, a reservation?) -> the cards it holds of a family that reads its
        # holders, and its annotations that family reads (hami.engine.holders).
        self._holders: dict[str, dict[tuple[str, bool], tuple[frozenset[str], Pairs]]] = {}
        self._states: dict[str, NodeState] = {}
        # Nodes whose usage or cards changed since their state was built.
        self._stale: set[str] = set()
        self._view: Mapping[str, NodeState] = MappingProxyType(self._states)
        # The same for the DRA placer's states (dra_states): also stale when the devices DRA
        # drivers publish on the node change (dra_touch).
        self._dra: dict[str, NodeState] = {}
        self._dra_stale: set[str] = set()
        self._dra_view: Mapping[str, NodeState] = MappingProxyType(self._dra)

    def names(self) -> list[str]:
        """Every node known, registered or not."""
        return [*self._inventory, *self.unregistered]

    def read(self, node: Mapping[str, Any]) -> tuple[str, Read]:
        """Take the Node object's inventory in; its name, and what that changed."""
        meta = node.get("metadata") or {}
        self._node_uids[str(meta.get("name", ""))] = str(meta.get("uid") or "")
        spec = node.get("spec") or {}
        self._fences[str(meta.get("name", ""))] = {
            "metadata": {"name": meta.get("name", ""), "labels": meta.get("labels") or {}},
            "spec": {"unschedulable": spec.get("unschedulable"), "taints": spec.get("taints")},
        }
        key = inventory_key(node, self._gpu_resource, self._gfd_split, families=self._families)
        name = str(key[0] or "")
        if self._node_keys.get(name) == key:
            return name, Read.SAME
        self._node_keys[name] = key
        inv = node_inventory(node, self._gpu_resource, self._gfd_split, families=self._families)
        if isinstance(inv, Unregistered):
            dropped = inv.name in self._inventory
            if dropped:
                self.drop(inv.name)
            self.unregistered[inv.name] = inv.why
            self._node_keys[name] = key
            return inv.name, Read.DROPPED if dropped else Read.UNREGISTERED
        self.unregistered.pop(inv.name, None)
        if self._inventory.get(inv.name) == inv:
            return inv.name, Read.SAME
        self._inventory[inv.name] = inv
        self._per_pod[inv.name] = (
            {d.id: d.share_base for d in inv.all_devices()},
            mig_devices(inv.devices),
        )
        self._changed(inv.name)
        return inv.name, Read.CHANGED

    def current(self, name: str, uid: str) -> bool:
        """Whether a Node of that uid is the one the node was read from (no uid: whichever);
        if so, the uid is forgotten (the node is about to be dropped)."""
        if uid and self._node_uids.get(name, uid) != uid:
            return False
        self._node_uids.pop(name, None)
        self._fences.pop(name, None)
        return True

    def drop(self, name: str) -> None:
        self._node_keys.pop(name, None)
        self._inventory.pop(name, None)
        self._per_pod.pop(name, None)
        self._states.pop(name, None)
        self._stale.discard(name)
        self._dra_stale.add(name)
        self.unregistered.pop(name, None)

    def handshake(self, node: str, devices: PodDevices) -> bool:
        """hami.cache.store.ClusterCache.handshake."""
        inv = self._inventory.get(node)
        nvidia = inv is None or inv.handshake
        if not self._family_types:
            return nvidia
        ours, others = split_devices(devices, self._families)
        if not others:
            return nvidia
        by_type = self._families.other_by_type()
        return (nvidia and any(ours)) or any(
            by_type[kind].wire.lock_name == NODE_LOCK for kind in others
        )

    def family_cards(self, node: str) -> Mapping[str, tuple[DeviceInfo, ...]]:
        """The other families' cards registered on `node`, by type."""
        inv = self._inventory.get(node)
        return {} if inv is None else dict(inv.families)

    def mig(self, name: str) -> frozenset[str]:
        derived = self._per_pod.get(name)
        return frozenset() if derived is None else derived[1]

    def share_bases(self, name: str) -> Mapping[str, int] | None:
        """DeviceInfo.share_base of each of the node's cards, by id; None while it has none
        registered."""
        derived = self._per_pod.get(name)
        return None if derived is None else derived[0]

    # --- usage and states -------------------------------------------------

    def count(self, node: str, usage: Mapping[str, Usage], sign: int) -> None:
        """Add (sign > 0) or remove one pod's usage of the node's cards."""
        per_card = self._usage.setdefault(node, {})
        for uuid, u in usage.items():
            total = per_card.get(uuid, Usage()) + u if sign > 0 else per_card.get(uuid, Usage()) - u
            if total.empty:
                per_card.pop(uuid, None)
            else:
                per_card[uuid] = total
        self._changed(node)

    def hold(
        self, node: str, key: tuple[str, bool], cards: frozenset[str], annotations: Pairs
    ) -> None:
        """A pod (keyed by uid and whether it is a reservation) holds `cards` of a family that
        reads its holders: the family's fits see `annotations` on them."""
        held = self._holders.setdefault(node, {})
        if held.get(key) != (cards, annotations):
            held[key] = (cards, annotations)
            self._changed(node)

    def unhold(self, node: str, key: tuple[str, bool]) -> None:
        held = self._holders.get(node)
        if held is None or held.pop(key, None) is None:
            return
        if not held:
            del self._holders[node]
        self._changed(node)

    def touch(self, name: str) -> None:
        """The node's usage changed outside count() (pods outside the scheduler)."""
        self._changed(name)

    def _changed(self, name: str) -> None:
        self._stale.add(name)
        self._dra_stale.add(name)

    def usage(self) -> Mapping[str, Mapping[str, Usage]]:
        return self._usage

    @property
    def view(self) -> Mapping[str, NodeState]:
        self.settle()
        return self._view

    def settle(self) -> None:
        for name in self._stale:
            self._build(name)
        self._stale.clear()

    def state(self, name: str) -> NodeState | None:
        if name in self._stale:
            self._stale.discard(name)
            self._build(name)
        return self._states.get(name)

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
            card_holders(held) if (held := self._holders.get(name)) else None,
            dict(inv.annotations) if inv.annotations else None,
            registry=self._families,
        )

    def dra_touch(self, name: str) -> None:
        """The devices DRA drivers publish on the node changed."""
        self._dra_stale.add(name)

    def dra_states(
        self, published: Callable[[str], Sequence[DraDevice]]
    ) -> Mapping[str, NodeState]:
        """The nodes as a DRA claim can take their cards (hami.engine.dra.slices.dra_inventory),
        on the same usage per card as the view: the pods', the reservations' and the claims'.
        `published` gives the devices DRA drivers publish on a node. Only the nodes whose
        usage, inventory or published devices changed since the last call are built again
        (rebuilding them all cost the placer 60 ms a pod at 1,000 nodes: tests/bench/draview.py)."""
        for name in self._dra_stale:
            devices = published(name)
            if not devices:
                self._dra.pop(name, None)
                continue
            inv = dra_inventory(name, devices, self._inventory.get(name), self._families)
            self._dra[name] = build_node(
                name,
                inv.devices,
                self._usage.get(name, {}),
                inv.cordoned,
                inv.links,
                self._dra.get(name),
                families=inv.families,
                annotations=dict(inv.annotations) if inv.annotations else None,
                registry=self._families,
            )
        self._dra_stale.clear()
        return self._dra_view

    def overcommitted(self, node: str, devices: PodDevices) -> list[str]:
        """hami.cache.store.ClusterCache.overcommitted."""
        state = self.state(node)
        return [] if state is None else overfull(state, devices, self._families)
