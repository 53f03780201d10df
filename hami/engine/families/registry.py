"""The one list of device families, and lookups by the names the wire carries.

Adding a family is one module under hami.engine.families, one entry in FAMILIES, its
tests and its chart values.
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from hami.engine.families import (
    amd,
    ascend,
    awsneuron,
    biren,
    cambricon,
    enflame,
    iluvatar,
    kunlun,
    mthreads,
    vastai,
)
from hami.engine.families.base import Family
from hami.engine.families.hygon import HYGON
from hami.engine.families.metax import MetaxGpu, MetaxSgpu


@dataclass(frozen=True)
class Families:
    """The families one process schedules, in the order HAMi registers them."""

    members: tuple[Family, ...] = ()

    def __iter__(self) -> Iterator[Family]:
        return iter(self.members)

    def by_type(self) -> Mapping[str, Family]:
        return {f.wire.type: f for f in self.members}

    def resource_names(self) -> tuple[str, ...]:
        """Every extended resource some family's pods ask for."""
        return tuple(n for f in self.members for n in f.wire.resources.all())

    def types(self) -> frozenset[str]:
        """The FamilyWire.type of every member: the device types that are not NVIDIA's."""
        return frozenset(f.wire.type for f in self.members)

# Filled as each family lands behind the seam (issue 31), in the order of HAMi's
# InitDevicesWithConfig (pkg/scheduler/config): NVIDIA, Cambricon, Hygon, Enflame (GCU,
# then VGCU), Moore Threads, MetaX (GPU, then sGPU), Kunlunxin (XPU, then vXPU), AWS Neuron,
# AMD, Vastai, Biren, then each Ascend chip and each Iluvatar chip.
FAMILIES = Families(
    (
        cambricon.FAMILY,
        HYGON,
        enflame.WHOLE_FAMILY,
        enflame.DRS_FAMILY,
        mthreads.FAMILY,
        MetaxGpu(),
        MetaxSgpu(),
        kunlun.WHOLE_FAMILY,
        kunlun.VXPU_FAMILY,
        awsneuron.FAMILY,
        amd.FAMILY,
        vastai.FAMILY,
        biren.FAMILY,
        *ascend.from_config(ascend.DEFAULT_VNPUS),
        *iluvatar.FAMILIES,
    )
)
