"""The one list of device families, and lookups by the names the wire carries.

Adding a family is one module under hami.engine.families, one entry in FAMILIES, its
tests and its chart values.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from hami.engine.families import (
    amd,
    ascend,
    awsneuron,
    biren,
    cambricon,
    enflame,
    hygon,
    iluvatar,
    kunlun,
    mthreads,
    vastai,
)
from hami.engine.families.base import Family
from hami.engine.families.metax.gpu import from_config as metax_gpu
from hami.engine.families.metax.sgpu import from_config as metax_sgpu
from hami.engine.families.nvidia.family import FAMILY as NVIDIA_FAMILY
from hami.engine.nvidianames import NVIDIA


@dataclass(frozen=True)
class Families:
    """The families one process schedules, in the order HAMi registers them (NVIDIA first).

    NVIDIA's cards are placed by hami.engine.decide's own path and the other families' by
    hami.engine.familyfit, so most callers want `others`; none iterates `Families` itself,
    so that each says which it means."""

    members: tuple[Family, ...] = ()

    @cached_property
    def others(self) -> tuple[Family, ...]:
        """The members other than NVIDIA's, in HAMi's order."""
        return tuple(f for f in self.members if f.wire.type != NVIDIA)

    def by_type(self) -> Mapping[str, Family]:
        return {f.wire.type: f for f in self.members}

    def other_by_type(self) -> Mapping[str, Family]:
        """`others` by type: where a type of NVIDIA's must find no family (the generic fit,
        the families' quotas and binds)."""
        return {f.wire.type: f for f in self.others}

    def other_resource_names(self) -> tuple[str, ...]:
        """Every extended resource the other families' pods ask for."""
        return tuple(n for f in self.others for n in f.wire.resources.all())

    def other_types(self) -> frozenset[str]:
        """The FamilyWire.type of every member but NVIDIA: the device types not NVIDIA's."""
        return frozenset(f.wire.type for f in self.others)

    @cached_property
    def other_resource_set(self) -> frozenset[str]:
        """other_resource_names as a set, made once: every pod event asks whether it names one
        (a cache keyed on the Families would hash all its members each time)."""
        return frozenset(self.other_resource_names())

    @cached_property
    def other_allocated_annotations(self) -> frozenset[str]:
        """The other families' allocated annotations: most pods carry none, which one set look
        tells."""
        return frozenset(f.wire.allocated_annotation for f in self.others)


def from_device_config(config: Mapping[str, Any]) -> Families:
    """Every family as HAMi's device-config.yaml configures it (the chart's defaults for a
    section the file leaves out), in the order of HAMi's InitDevicesWithConfig
    (pkg/scheduler/config): NVIDIA, Cambricon, Hygon, Enflame (GCU, then VGCU), Moore
    Threads, MetaX (GPU, then sGPU), Kunlunxin (XPU, then vXPU), AWS Neuron, AMD, Vastai,
    Biren, then each Ascend chip (`vnpus`) and each Iluvatar chip (`iluvatars`). NVIDIA's
    section is read apart (hami.runtime.deviceconfig checks it against serve's flags, which
    configure NVIDIA), so NVIDIA's member is the chart's default.

    Raises ValueError or TypeError for a section it cannot read."""

    def section(name: str) -> Mapping[str, Any]:
        value = config.get(name) or {}
        if not isinstance(value, Mapping):
            raise ValueError(f"{name} must be a mapping, got {type(value).__name__}")
        return value

    iluvatars = config.get("iluvatars") or [iluvatar.chart_section(c) for c in iluvatar.CHIPS]
    if not isinstance(iluvatars, list):
        raise ValueError(f"iluvatars must be a list, got {type(iluvatars).__name__}")
    return Families(
        (
            NVIDIA_FAMILY,
            cambricon.from_config(section("cambricon")),
            hygon.from_config(section("hygon")),
            *enflame.from_config(section("enflame")),
            mthreads.from_config(section("mthreads")),
            metax_gpu(section("metax")),
            metax_sgpu(section("metax")),
            *kunlun.from_config(section("kunlun")),
            awsneuron.from_config(section("awsneuron")),
            amd.from_config(section("amd")),
            vastai.from_config(section("vastai")),
            biren.from_config(section("biren")),
            *ascend.from_config(section("vnpus") or ascend.DEFAULT_VNPUS),
            *iluvatar.from_config(iluvatars),
        )
    )


# The families one process schedules: the chart's default device-config.yaml (issue 31).
FAMILIES = from_device_config({})
