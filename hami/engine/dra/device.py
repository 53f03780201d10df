"""The DRA device as the engine keeps it: one entry of a ResourceSlice's spec.devices, reduced
to what a GPU card is to the scheduler.

A device is addressed by (driver, pool, device name), as an allocation result names it; the
card it is, by its `uuid` attribute (the one a device plugin registers the card under, so that
a card published by a DRA driver and registered by HAMi's device plugin is one card).
"""

from dataclasses import dataclass

# The tasks a card only a DRA driver publishes is shared by, unless --dra-split-count says
# otherwise or the driver publishes a `slices` capacity: HAMi's device plugin's default
# deviceSplitCount, so that such a card is scored as the same card registered would be (NVIDIA's
# and HAMi-DRA's drivers bound no task count; their consumable capacity bounds memory and cores).
DRA_SPLIT = 10

# (driver, pool, device name): what a claim's allocation result names.
DeviceKey = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class DraDevice:
    """A GPU a DRA driver published for one node."""

    driver: str
    pool: str
    name: str  # the device's name in its slice (e.g. "gpu-0")
    node: str
    uuid: str  # the card's UUID (attribute `uuid`); the device's own key where it has none
    product: str  # attribute `productName`, e.g. "Tesla T4"; "" when not published
    kind: str  # attribute `type` (NVIDIA's driver: "gpu", "mig"; HAMi-DRA's: "hami-gpu")
    memory: int  # MiB of capacity `memory`; 0 when not published
    cores: int  # capacity `cores` as a percent of the card (100 when not published)
    # Attribute `index`, else `minor`, where published; else the device's rank by name in its
    # slice (hami.engine.dra.slices.read_slice).
    index: int = 0
    # spec.devices[].allowMultipleAllocations: several claims share it, each consuming part of
    # its capacity (consumable capacity); otherwise a claim takes the whole device.
    shared: bool = False
    # How many tasks may share it: its capacity `slices` where the driver publishes one
    # (Hygon's: 4, each claim consuming 1), else the run's setting (--dra-split-count), as HAMi's
    # device plugin's deviceSplitCount bounds a registered card.
    split: int = DRA_SPLIT
    # Attribute `numa` where the driver publishes it (NVIDIA's and HAMi-DRA's drivers do on
    # their VFIO devices, not on their GPUs), else 0, HAMi's NUMA node for a card that names none.
    numa: int = 0
    # A partition of a card (NVIDIA's MIG devices, a partitionable device's parts), not a card:
    # what a claim takes of it is counted on its parent, the card whose UUID `parent` is ("":
    # not known).
    partition: bool = False
    parent: str = ""
    # The counter sets it consumes (spec.devices[].consumesCounters): a partition without a
    # `parentUUID` attribute is part of the card consuming the same set (hami.engine.dra.slices).
    counters: tuple[str, ...] = ()
    multiprocessors: int = 0  # capacity `multiprocessors` (NVIDIA's), 0 when not published
    # The card's compute units, where its driver publishes capacity `cores` in them
    # (FamilyWire.dra_core_units); 0 where `cores` is a percent.
    units: int = 0

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.name)


def to_units(percent: int, units: int) -> int:
    """The compute units a claim asks for `percent` of a card of `units`: rounded up (never less
    than the pod asked), never more than the card has."""
    return min(units, -(-percent * units // 100))


def to_percent(consumed: int, units: int) -> int:
    """The percent of a card of `units` that `consumed` compute units are, rounded up: the
    per-card sums then never leave room the driver's capacity does not have (a claim's share
    that is no whole percent counts as the next one)."""
    return min(100, -(-consumed * 100 // units))


@dataclass(frozen=True, slots=True)
class DeviceUse:
    """What one allocation result of a claim takes of one device (capacity it consumed, or
    the whole device)."""

    device: DeviceKey
    memory: int | None  # MiB consumed; None: the whole device's memory
    cores: int | None  # cores consumed, in the driver's unit; None: the whole device's cores
