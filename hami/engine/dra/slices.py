"""A node's ResourceSlices read as GPU cards (resource.k8s.io/v1).

A slice belongs to one pool of one driver; a pool may span several slices, and while a driver
republishes it the slices of an older `pool.generation` linger: only the newest generation's
devices count, as kube-scheduler's allocator reads them. A device is a GPU to the scheduler
when its driver is one of the GPU drivers given (HAMi-DRA's, NVIDIA's) and it names a node
(the slice's `nodeName`, or the device's own under perDeviceNodeSelection); network-attached
devices, other drivers' (NICs, IMEX channels) and NVIDIA's MIG devices (NOT_CARDS) are not
cards.

Attribute names may be written with their domain (`gpu.nvidia.com/uuid`) or without it, when
the domain is the driver's; both are read. Attribute values are typed (`string`, `int`,
`bool`, `version`); capacities are quantities under `value` (NVIDIA's driver publishes
`memory` in bytes; HAMi-DRA adds `cores`, in percent of the card's SMs; Hygon's driver publishes
`cores` as the card's compute units, kept as DraDevice.units beside a card of 100 percent, and
`slices`, the claims a card takes).

A partition of a card is read as such, not as a card: NVIDIA's driver (k8s-dra-driver-gpu,
`CommonAttributesMig`) publishes each MIG device beside its full GPU with `type: mig` and the
full GPU's UUID as `parentUUID`, its instance's `memory` (bytes) and `multiprocessors` as
capacity; under partitionable devices (KEP-4815) a MIG device carries no `uuid` of its own and
consumes counters from a counter set the full GPU consumes too. A partition's parent is the
card its `parentUUID` names or, without one, the card of its pool consuming the same counter
set; a claim on it is counted on that card (hami.engine.dra.claims).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from hami.engine import nvidianames as nv
from hami.engine.dra.device import DRA_SPLIT, DeviceKey, DraDevice
from hami.engine.families.registry import Families
from hami.engine.model import DeviceInfo, NodeInventory
from hami.engine.quantity import QuantityError, parse_quantity

MIB = 2**20
FULL_CORES = 100
HAMI_DRA_DRIVER = nv.HAMI_DRA_DRIVER
GPU_DRIVERS = nv.DRA_DRIVERS
# Device types that are part of a card rather than one: NVIDIA's static MIG devices carry
# their own UUID, which must not make them cards of their own.
NOT_CARDS = frozenset({"mig"})


@dataclass(frozen=True, slots=True)
class SliceRead:
    """What the scheduler keeps of one ResourceSlice."""

    driver: str
    pool: str
    generation: int
    devices: tuple[DraDevice, ...]

    @property
    def pool_key(self) -> tuple[str, str]:
        return (self.driver, self.pool)


def _attribute(attributes: Mapping[str, Any], driver: str, name: str) -> object:
    value = attributes.get(name)
    if value is None:
        value = attributes.get(f"{driver}/{name}")
    if not isinstance(value, Mapping):
        return None
    for kind in ("string", "int", "version", "bool"):
        if kind in value:
            return value[kind]
    return None


def _capacity(capacity: Mapping[str, Any], driver: str, name: str) -> Fraction | None:
    entry = capacity.get(name) or capacity.get(f"{driver}/{name}")
    if not isinstance(entry, Mapping):
        return None
    try:
        return parse_quantity(entry.get("value"))
    except QuantityError:
        return None


def mib(value: Fraction | None, *, up: bool) -> int | None:
    """Bytes as MiB: consumed amounts round up, capacities down (never more room than there
    is)."""
    if value is None:
        return None
    whole = value / MIB
    return max(0, int(-(-whole // 1)) if up else int(whole // 1))


def read_slice(
    obj: Mapping[str, Any],
    drivers: Iterable[str] = GPU_DRIVERS,
    split: int = DRA_SPLIT,
    unit_drivers: frozenset[str] = frozenset(),
) -> SliceRead | None:
    """The slice's GPUs, each shared by `split` tasks at most unless it publishes its
    `slices`, with `cores` read as compute units for the drivers of `unit_drivers`; None when
    it is not a GPU driver's slice."""
    spec = obj.get("spec") or {}
    driver = str(spec.get("driver") or "")
    if driver not in drivers:
        return None
    pool = spec.get("pool") or {}
    try:
        generation = int(pool.get("generation") or 0)
    except (TypeError, ValueError):
        generation = 0
    node = str(spec.get("nodeName") or "")
    listed = [d for d in spec.get("devices") or () if isinstance(d, Mapping)]
    # A device publishing no number is ranked by its name: Hygon's driver lists its devices in
    # Go map order (a new order on each publish) and names them by PCI address, `hcu-<pci>`.
    ranks = {n: i for i, n in enumerate(sorted(str(d.get("name") or "") for d in listed))}
    units = driver in unit_drivers
    devices = []
    for device in listed:
        on = str(device.get("nodeName") or node)
        name = str(device.get("name") or "")
        if not on or not name:
            continue
        attributes = device.get("attributes") or {}
        kind = str(_attribute(attributes, driver, "type") or "")
        parent = str(_attribute(attributes, driver, "parentUUID") or "")
        capacity = device.get("capacity") or {}
        # NVIDIA's driver publishes `index`; HAMi-DRA's publishes only the `minor` number.
        index = _attribute(attributes, driver, "index")
        if index is None:
            index = _attribute(attributes, driver, "minor")
        numa = _attribute(attributes, driver, "numa")
        memory = mib(_capacity(capacity, driver, "memory"), up=False)
        cores = _capacity(capacity, driver, "cores")
        sms = _capacity(capacity, driver, "multiprocessors")
        # Hygon's driver bounds the claims on a DCU by a consumable `slices` capacity (4, one
        # taken by each claim that asks none): the card is shared by no more.
        slices = _capacity(capacity, driver, "slices")
        whole = 0 if cores is None else max(0, int(cores))
        devices.append(
            DraDevice(
                driver=driver,
                pool=str(pool.get("name") or ""),
                name=name,
                node=on,
                uuid=str(_attribute(attributes, driver, "uuid") or f"{driver}/{on}/{name}"),
                product=str(_attribute(attributes, driver, "productName") or ""),
                kind=kind,
                memory=memory or 0,
                cores=FULL_CORES if cores is None or units else whole,
                index=index
                if isinstance(index, int) and not isinstance(index, bool)
                else ranks[name],
                shared=device.get("allowMultipleAllocations") is True,
                split=split if slices is None or slices < 1 else min(split, int(slices)),
                numa=numa if isinstance(numa, int) and not isinstance(numa, bool) else 0,
                partition=kind in NOT_CARDS or bool(parent),
                parent=parent,
                counters=_counter_sets(device),
                multiprocessors=0 if sms is None else max(0, int(sms)),
                units=whole if units else 0,
            )
        )
    return SliceRead(driver, str(pool.get("name") or ""), generation, tuple(devices))


def _counter_sets(device: Mapping[str, Any]) -> tuple[str, ...]:
    consumes = device.get("consumesCounters") or ()
    return tuple(
        str(c["counterSet"]) for c in consumes if isinstance(c, Mapping) and c.get("counterSet")
    )


def published(slices: Iterable[SliceRead]) -> dict[DeviceKey, DraDevice]:
    """Every device of the newest generation of each pool, by the key a claim names it by,
    each partition with its parent card and the share of its cores it takes."""
    newest: dict[tuple[str, str], int] = {}
    kept = list(slices)
    for s in kept:
        newest[s.pool_key] = max(newest.get(s.pool_key, s.generation), s.generation)
    devices = {d.key: d for s in kept if s.generation == newest[s.pool_key] for d in s.devices}
    cards = {d.uuid: d for d in devices.values() if not d.partition}
    by_set = {(d.driver, d.pool, c): d for d in cards.values() for c in d.counters}
    for key, d in devices.items():
        if d.partition:
            parent = cards.get(d.parent) or next(
                (
                    by_set[(d.driver, d.pool, c)]
                    for c in d.counters
                    if (d.driver, d.pool, c) in by_set
                ),
                None,
            )
            devices[key] = _part_of(d, parent)
    return devices


def _part_of(part: DraDevice, card: DraDevice | None) -> DraDevice:
    """The partition with its parent's UUID and, where both publish their multiprocessors,
    the share of the card's cores they are (else the whole card's: never less than it takes)."""
    if card is None:
        return part
    cores = part.cores
    if part.multiprocessors and card.multiprocessors:
        cores = min(FULL_CORES, -(-FULL_CORES * part.multiprocessors // card.multiprocessors))
    return replace(part, parent=card.uuid, cores=cores)


def card_info(device: DraDevice) -> DeviceInfo:
    """The device as a card of the engine's model, typed as its driver publishes it."""
    return DeviceInfo(
        id=device.uuid,
        index=device.index,
        count=device.split,
        devmem=device.memory,
        devcore=device.cores,
        type=device.product or device.kind,
        numa=device.numa,
    )


def _as_registered(card: DeviceInfo, family: str) -> DeviceInfo:
    """The card typed as HAMi's device plugins type it (`NVIDIA-<productName>`,
    `DCU-<productName>`): the engine's vendor match reads the family's word, the drivers
    publish the bare model."""
    if family.lower() in card.type.lower():
        return card
    return replace(card, type=f"{family}-{card.type}")


def dra_inventory(
    name: str,
    devices: Iterable[DraDevice],
    registered: NodeInventory | None,
    families: Families,
) -> NodeInventory:
    """The node's cards a DRA claim can be pinned to, as the engine reads a node: each card a
    DRA driver publishes, of the family its driver serves (Families.dra_drivers), as HAMi's
    device plugin registers it where it does (one card in both worlds, scored alike in both)
    and as the driver publishes it elsewhere. A registered card no DRA driver publishes is not
    among them: no claim could be allocated on it."""
    known = {d.id: d for d in registered.all_devices()} if registered is not None else {}
    by_family: dict[str, dict[str, DeviceInfo]] = {}
    for d in devices:
        family = families.dra_drivers.get(d.driver)
        if family is not None:
            card = known.get(d.uuid) or _as_registered(card_info(d), family)
            by_family.setdefault(family, {})[d.uuid] = card

    def ordered(found: Iterable[DeviceInfo]) -> tuple[DeviceInfo, ...]:
        return tuple(sorted(found, key=lambda c: (c.index, c.id)))

    # The cards of the family owning the node's inventory (NVIDIA's) are its own; the others'
    # are listed by family, as their registrations are (NodeInventory.families).
    carded = tuple(f.wire.type for f in families.carded)
    own = ordered(
        c for kind, found in by_family.items() if kind not in carded for c in found.values()
    )
    others = tuple(
        (kind, ordered(by_family[kind].values())) for kind in carded if kind in by_family
    )
    return NodeInventory(
        name,
        own,
        registered.cordoned if registered is not None else frozenset(),
        registered.links if registered is not None else {},
        families=others,
        annotations=registered.annotations if registered is not None else (),
    )
