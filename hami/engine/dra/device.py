"""The DRA device as the engine keeps it: one entry of a ResourceSlice's spec.devices, reduced
to what a GPU card is to the scheduler.

A device is addressed by (driver, pool, device name), as an allocation result names it; the
card it is, by its `uuid` attribute (the one a device plugin registers the card under, so that
a card published by a DRA driver and registered by HAMi's device plugin is one card).
"""

from dataclasses import dataclass

# The tasks a card only a DRA driver publishes is shared by, unless --dra-split-count says
# otherwise: HAMi's device plugin's default deviceSplitCount, so that such a card is scored as
# the same card registered would be (a DRA driver bounds no task count; its consumable
# capacity bounds memory and cores).
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
    cores: int  # capacity `cores` (percent of SMs); 100 when not published
    index: int = 0  # attribute `index` where published, else the device's place in its slice
    # spec.devices[].allowMultipleAllocations: several claims share it, each consuming part of
    # its capacity (consumable capacity); otherwise a claim takes the whole device.
    shared: bool = False
    # How many tasks may share it: no DRA driver publishes a bound, so the run's setting
    # (--dra-split-count), as HAMi's device plugin's deviceSplitCount bounds a registered card.
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

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.name)


@dataclass(frozen=True, slots=True)
class DeviceUse:
    """What one allocation result of a claim takes of one device (capacity it consumed, or
    the whole device)."""

    device: DeviceKey
    memory: int | None  # MiB consumed; None: the whole device's memory
    cores: int | None  # cores consumed; None: the whole device's cores
