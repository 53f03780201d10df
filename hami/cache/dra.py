"""The DRA side of the books: ResourceSlices, allocated ResourceClaims and DeviceClasses, fed
by their informers, counted on the same per-card and per-namespace sums as the pods.

A claim's results are read against the devices published now (hami.engine.dra): a card a DRA
driver publishes under the UUID HAMi's device plugin registers it by is one card, and what the
claim consumed there is added to that card's usage beside the pods' (hami.cache.nodes). What a
claim holds is recounted whenever it or a pool it uses changes (a slice arriving after its
claim, a pool republished), so the sums never depend on the order events came in. A card only
a DRA driver publishes is counted too (its usage is kept by node and UUID) and shown, though
the device-plugin pods are never placed on it.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from hami.engine.dra.claims import ClaimUse, claim_usage, read_claim
from hami.engine.dra.device import DRA_SPLIT, DeviceKey, DraDevice
from hami.engine.dra.slices import GPU_DRIVERS, SliceRead, published, read_slice
from hami.engine.model import Usage

Pool = tuple[str, str]
# node -> card UUID -> usage
NodeUsage = dict[str, dict[str, Usage]]
# (node, namespace, the usage, +1 or -1): hami.cache.counts.Counts.account
Account = Callable[[str, str, Mapping[str, Usage], int], None]


def _uid(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")


class DraBook:
    """Slices by pool, claims by uid, and what each claim is counted as now."""

    def __init__(
        self,
        account: Account,
        released: Callable[[str], None],
        drivers: Iterable[str] = GPU_DRIVERS,
        claimed: Callable[[str], None] = lambda _: None,
        moved: Callable[[str], None] = lambda _: None,
        split: int = DRA_SPLIT,
        unit_drivers: frozenset[str] = frozenset(),
    ) -> None:
        self._account = account
        self._released = released
        # Told the uid of each pod owning a claim whose count started: its reservation ends.
        self._claimed = claimed
        # Told each node whose published devices changed (the DRA view builds it again).
        self._moved = moved
        self._drivers = tuple(drivers)
        self._split = split  # tasks per card (hami.engine.dra.device.DraDevice.split)
        self._unit_drivers = unit_drivers  # those publishing `cores` in compute units
        self._slices: dict[str, SliceRead] = {}  # slice uid -> what it publishes
        self._pools: dict[Pool, dict[str, SliceRead]] = {}
        self._devices: dict[DeviceKey, DraDevice] = {}
        self._pool_devices: dict[Pool, tuple[DeviceKey, ...]] = {}
        # node -> its devices, and the nodes in order: read on every placement
        self._by_node: dict[str, dict[DeviceKey, DraDevice]] = {}
        self._nodes: tuple[str, ...] | None = ()
        self._claims: dict[str, ClaimUse] = {}
        self._by_pool: dict[Pool, set[str]] = {}  # pool -> uids of the claims using it
        self._counted: dict[str, tuple[str, NodeUsage]] = {}  # uid -> (namespace, usage)
        self._owned: dict[str, set[str]] = {}  # pod uid -> uids of its claims counted
        self._owners: dict[str, tuple[str, ...]] = {}  # counted claim uid -> its pods' uids
        self.classes: dict[str, str] = {}  # DeviceClass name -> its extendedResourceName

    # --- ResourceSlices ----------------------------------------------------------------------

    def replace_slices(self, objects: Sequence[Mapping[str, Any]]) -> None:
        for uid in list(self._slices):
            self.delete_slice({"metadata": {"uid": uid}})
        for obj in objects:
            self.upsert_slice(obj)

    def upsert_slice(self, obj: Mapping[str, Any]) -> None:
        uid = _uid(obj)
        read = read_slice(obj, self._drivers, self._split, self._unit_drivers)
        old = self._slices.pop(uid, None)
        if old is not None:
            self._pools.get(old.pool_key, {}).pop(uid, None)
        if read is not None:
            self._slices[uid] = read
            self._pools.setdefault(read.pool_key, {})[uid] = read
        for pool in {s.pool_key for s in (old, read) if s is not None}:
            self._republish(pool)

    def delete_slice(self, obj: Mapping[str, Any]) -> None:
        old = self._slices.pop(_uid(obj), None)
        if old is not None:
            self._pools.get(old.pool_key, {}).pop(_uid(obj), None)
            self._republish(old.pool_key)

    def _republish(self, pool: Pool) -> None:
        slices = self._pools.get(pool) or {}
        if not slices:
            self._pools.pop(pool, None)
        moved = set()
        for key in self._pool_devices.pop(pool, ()):
            gone = self._devices.pop(key, None)
            if gone is not None:
                moved.add(gone.node)
                self._by_node[gone.node].pop(key, None)
        devices = published(slices.values())
        self._devices.update(devices)
        if devices:
            self._pool_devices[pool] = tuple(devices)
        for key, device in devices.items():
            moved.add(device.node)
            self._by_node.setdefault(device.node, {})[key] = device
        for node in sorted(moved):
            if not self._by_node.get(node):
                del self._by_node[node]
            self._nodes = None
            self._moved(node)
        for uid in sorted(self._by_pool.get(pool, ())):
            self._recount(uid)

    # --- ResourceClaims ----------------------------------------------------------------------

    def replace_claims(self, objects: Sequence[Mapping[str, Any]]) -> None:
        for uid in list(self._claims):
            self.delete_claim({"metadata": {"uid": uid}})
        for obj in objects:
            self.upsert_claim(obj)

    def upsert_claim(self, obj: Mapping[str, Any]) -> None:
        uid = _uid(obj)
        use = read_claim(obj)
        old = self._claims.get(uid)
        if use == old:
            return
        self._index(uid, old, -1)
        if use is None:
            self._claims.pop(uid, None)
        else:
            self._claims[uid] = use
            self._index(uid, use, +1)
        self._recount(uid)

    def delete_claim(self, obj: Mapping[str, Any]) -> None:
        uid = _uid(obj)
        self._index(uid, self._claims.pop(uid, None), -1)
        self._recount(uid)

    def _index(self, uid: str, use: ClaimUse | None, sign: int) -> None:
        for pool in use.pools() if use is not None else ():
            if sign > 0:
                self._by_pool.setdefault(pool, set()).add(uid)
            elif (uids := self._by_pool.get(pool)) is not None:
                uids.discard(uid)
                if not uids:
                    del self._by_pool[pool]

    def _recount(self, uid: str) -> None:
        use = self._claims.get(uid)
        now = None if use is None else (use.namespace, claim_usage(use, self._devices))
        was = self._counted.get(uid)
        if now == was:
            return
        if was is not None:
            namespace, usage = was
            for node, per_card in usage.items():
                self._account(node, namespace, per_card, -1)
        if now is not None and now[1]:
            self._counted[uid] = now
            for node, per_card in now[1].items():
                self._account(node, now[0], per_card, +1)
        else:
            self._counted.pop(uid, None)
        self._own(uid, use.owners if use is not None and uid in self._counted else ())
        if was is None:
            return
        for node, per_card in was[1].items():
            if now is None or now[1].get(node) != per_card:
                self._released(node)

    def _own(self, uid: str, owners: tuple[str, ...]) -> None:
        """The counted claim `uid` is now owned by `owners` (none: not counted)."""
        before = self._owners.pop(uid, ())
        if owners:
            self._owners[uid] = owners
        for owner in set(before) - set(owners):
            claims = self._owned[owner]
            claims.discard(uid)
            if not claims:
                del self._owned[owner]
        for owner in sorted(set(owners) - set(before)):
            self._owned.setdefault(owner, set()).add(uid)
            self._claimed(owner)

    def counted_for(self, owner: str) -> int:
        """How many of the pod's claims are counted now."""
        return len(self._owned.get(owner, ()))

    # --- DeviceClasses -----------------------------------------------------------------------

    def replace_classes(self, objects: Sequence[Mapping[str, Any]]) -> None:
        self.classes.clear()
        for obj in objects:
            self.upsert_class(obj)

    def upsert_class(self, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        self.classes[name] = str((obj.get("spec") or {}).get("extendedResourceName") or "")

    def delete_class(self, obj: Mapping[str, Any]) -> None:
        self.classes.pop(str((obj.get("metadata") or {}).get("name") or ""), None)

    # --- reading -----------------------------------------------------------------------------

    def devices(self, node: str | None = None) -> list[DraDevice]:
        """The GPUs DRA drivers publish (on `node`), by node and index; their partitions are
        not cards."""
        found = self._devices.values() if node is None else self._by_node.get(node, {}).values()
        return sorted(
            (d for d in found if not d.partition), key=lambda d: (d.node, d.index, d.uuid)
        )

    def compute_units(self, node: str) -> dict[str, int]:
        """Card UUID -> compute units of the node's cards whose driver counts `cores` in them
        (what a claim pinned there asks cores in: hami.engine.dra.claimspec.pinned_spec)."""
        return {d.uuid: d.units for d in self.devices(node) if d.units}

    def nodes(self) -> list[str]:
        """The nodes DRA drivers publish GPUs of."""
        if self._nodes is None:
            self._nodes = tuple(
                sorted(
                    n
                    for n, ds in self._by_node.items()
                    if any(not d.partition for d in ds.values())
                )
            )
        return list(self._nodes)

    def uuids(self) -> frozenset[str]:
        return frozenset(d.uuid for d in self._devices.values() if not d.partition)

    def usage(self) -> NodeUsage:
        """What the allocated claims hold, summed by node and card."""
        out: NodeUsage = {}
        for _, usage in self._counted.values():
            for node, per_card in usage.items():
                mine = out.setdefault(node, {})
                for uuid, u in per_card.items():
                    mine[uuid] = mine.get(uuid, Usage()) + u
        return out

    def claims_on(self, node: str) -> list[tuple[str, str, dict[str, Usage]]]:
        """(namespace, claim name, usage by card) of each claim holding cards of `node`."""
        out = []
        for uid, (namespace, usage) in self._counted.items():
            if node in usage:
                out.append((namespace, self._claims[uid].name, usage[node]))
        return sorted(out, key=lambda c: (c[0], c[1]))
