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
`memory` in bytes; HAMi-DRA adds `cores`, in percent of the card's SMs).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from hami.engine.dra.device import DeviceKey, DraDevice
from hami.engine.model import DeviceInfo
from hami.engine.quantity import QuantityError, parse_quantity

MIB = 2**20
FULL_CORES = 100
# HAMi-DRA's driver (hami-core over NVIDIA's kubelet plugin) and NVIDIA's own.
HAMI_DRA_DRIVER = "hami-core-gpu.project-hami.io"
GPU_DRIVERS = (HAMI_DRA_DRIVER, "gpu.nvidia.com")
# The DeviceClasses whose claims are counted on the card they take (HAMi-DRA's and NVIDIA's
# whole-GPU class, each named after its driver): a GPU pod's own claims of these need no
# refusal while the bookkeeping runs. NVIDIA's MIG and VFIO classes are not among them (a MIG
# device is not counted on its parent card; a VFIO device is no card of the device plugin's).
COUNTED_CLASSES = (HAMI_DRA_DRIVER, "gpu.nvidia.com")
# Device types that are part of a card rather than one: NVIDIA's MIG devices carry their own
# UUID, so they would show as cards of their own; what they take of their parent is not
# counted (their class, mig.nvidia.com, stays refused on GPU pods).
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


def read_slice(obj: Mapping[str, Any], drivers: Iterable[str] = GPU_DRIVERS) -> SliceRead | None:
    """The slice's GPUs; None when it is not a GPU driver's slice."""
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
    devices = []
    for place, device in enumerate(spec.get("devices") or ()):
        if not isinstance(device, Mapping):
            continue
        on = str(device.get("nodeName") or node)
        name = str(device.get("name") or "")
        if not on or not name:
            continue
        attributes = device.get("attributes") or {}
        kind = str(_attribute(attributes, driver, "type") or "")
        if kind in NOT_CARDS:
            continue
        capacity = device.get("capacity") or {}
        # NVIDIA's driver publishes `index`; HAMi-DRA's publishes only the `minor` number.
        index = _attribute(attributes, driver, "index")
        if index is None:
            index = _attribute(attributes, driver, "minor")
        memory = mib(_capacity(capacity, driver, "memory"), up=False)
        cores = _capacity(capacity, driver, "cores")
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
                cores=FULL_CORES if cores is None else max(0, int(cores)),
                index=index if isinstance(index, int) and not isinstance(index, bool) else place,
                shared=device.get("allowMultipleAllocations") is True,
            )
        )
    return SliceRead(driver, str(pool.get("name") or ""), generation, tuple(devices))


def published(slices: Iterable[SliceRead]) -> dict[DeviceKey, DraDevice]:
    """Every device of the newest generation of each pool, by the key a claim names it by."""
    newest: dict[tuple[str, str], int] = {}
    kept = list(slices)
    for s in kept:
        newest[s.pool_key] = max(newest.get(s.pool_key, s.generation), s.generation)
    return {d.key: d for s in kept if s.generation == newest[s.pool_key] for d in s.devices}


# The tasks a card only a DRA driver publishes is shared by: HAMi's device plugin's default
# deviceSplitCount, so that such a card is scored as the same card registered would be (a DRA
# driver bounds no task count; its consumable capacity bounds memory and cores).
DRA_SPLIT = 10


def card_info(device: DraDevice) -> DeviceInfo:
    """The device as a card of the engine's model, typed as its driver publishes it."""
    return DeviceInfo(
        id=device.uuid,
        index=device.index,
        count=DRA_SPLIT,
        devmem=device.memory,
        devcore=device.cores,
        type=device.product or device.kind,
    )


def _as_registered(card: DeviceInfo) -> DeviceInfo:
    """The card typed as HAMi's device plugin types it (`NVIDIA-<productName>`): the engine's
    vendor match reads the word, NVIDIA's driver publishes the bare model."""
    return card if "nvidia" in card.type.lower() else replace(card, type=f"NVIDIA-{card.type}")


def dra_cards(
    devices: Iterable[DraDevice], registered: Iterable[DeviceInfo]
) -> tuple[DeviceInfo, ...]:
    """The node's cards a DRA claim can be pinned to, by index: each card a DRA driver
    publishes, as HAMi's device plugin registers it where it does (one card in both worlds,
    scored alike in both) and as the driver publishes it elsewhere. A registered card no DRA
    driver publishes is not among them: no claim could be allocated on it."""
    known = {d.id: d for d in registered}
    cards = {d.uuid: known.get(d.uuid) or _as_registered(card_info(d)) for d in devices}
    return tuple(sorted(cards.values(), key=lambda c: (c.index, c.id)))
