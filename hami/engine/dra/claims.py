"""What an allocated ResourceClaim takes of the cards (resource.k8s.io/v1).

kube-scheduler's DynamicResources plugin writes `status.allocation` before it binds the pod:
`devices.results[]` names each device by driver, pool and device name, and, on a device that
allows multiple allocations, what the claim consumed of its capacity (`consumedCapacity`,
already rounded up to the driver's request policy; a capacity the claim did not ask and the
device gives no default for is consumed whole). A claim holds its devices from allocation until
its allocation is removed, whether or not a pod is in `reservedFor` yet, as the allocator
counts it: so does the scheduler.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hami.engine.dra.device import DeviceKey, DeviceUse, DraDevice, to_percent
from hami.engine.dra.slices import mib
from hami.engine.model import Usage
from hami.engine.quantity import QuantityError, parse_quantity


@dataclass(frozen=True, slots=True)
class ClaimUse:
    """An allocated claim's results."""

    namespace: str
    name: str
    uses: tuple[DeviceUse, ...]
    consumers: int  # entries of status.reservedFor
    # The uids of the pods owning it (the DRA placer's claims are owned by their pod): whose
    # reservation its count takes over (hami.cache.store.ClusterCache).
    owners: tuple[str, ...] = ()

    def pools(self) -> frozenset[tuple[str, str]]:
        return frozenset((u.device[0], u.device[1]) for u in self.uses)


def _consumed(consumed: Mapping[str, Any], driver: str, name: str) -> Any:
    return consumed.get(name, consumed.get(f"{driver}/{name}"))


def read_claim(obj: Mapping[str, Any]) -> ClaimUse | None:
    """The claim's allocation results; None while it is not allocated."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    allocation = status.get("allocation")
    if not isinstance(allocation, Mapping):
        return None
    uses = []
    for result in (allocation.get("devices") or {}).get("results") or ():
        if not isinstance(result, Mapping):
            continue
        driver = str(result.get("driver") or "")
        key = (driver, str(result.get("pool") or ""), str(result.get("device") or ""))
        consumed = result.get("consumedCapacity") or {}
        memory = cores = None
        try:
            raw = _consumed(consumed, driver, "memory")
            memory = None if raw is None else mib(parse_quantity(raw), up=True)
            raw = _consumed(consumed, driver, "cores")
            cores = None if raw is None else -(-parse_quantity(raw) // 1)
        except QuantityError:
            memory = cores = None  # unreadable: counted as the whole device
        uses.append(DeviceUse(key, memory, None if cores is None else int(cores)))
    return ClaimUse(
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        tuple(uses),
        len(status.get("reservedFor") or ()),
        tuple(
            str(o.get("uid"))
            for o in meta.get("ownerReferences") or ()
            if isinstance(o, Mapping) and o.get("kind") == "Pod" and o.get("uid")
        ),
    )


def claim_usage(
    claim: ClaimUse, devices: Mapping[DeviceKey, DraDevice]
) -> dict[str, dict[str, Usage]]:
    """node -> card UUID -> what the claim holds there; results on devices not published (yet,
    or not a GPU driver's) hold no card. A claim sharing a device consumes what it recorded; an
    exclusive one (or a capacity not recorded) the device's whole memory and cores; cores a
    driver counts in compute units are counted as the percent of the card they are. A partition
    (a MIG device) is held on its parent card, its memory and its share of the cores; one whose
    parent is not known holds no card."""
    out: dict[str, dict[str, Usage]] = {}
    for use in claim.uses:
        device = devices.get(use.device)
        if device is None or (device.partition and not device.parent):
            continue
        memory = device.memory if use.memory is None or not device.shared else use.memory
        if use.cores is None or not device.shared:
            cores = device.cores
        else:
            cores = to_percent(use.cores, device.units) if device.units else use.cores
        card = device.parent or device.uuid
        per_card = out.setdefault(device.node, {})
        per_card[card] = per_card.get(card, Usage()) + Usage(1, memory, cores)
    return out
