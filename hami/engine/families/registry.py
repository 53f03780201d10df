"""The one list of device families, and lookups by the names the wire carries.

Adding a family is one module under hami.engine.families, one entry in FAMILIES, its
tests and its chart values.
"""

from collections.abc import Iterator, Mapping
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

    @cached_property
    def resource_set(self) -> frozenset[str]:
        """resource_names as a set, made once: every pod event asks whether it names one (a
        cache keyed on the Families would hash all its members each time)."""
        return frozenset(self.resource_names())

    @cached_property
    def allocated_annotations(self) -> frozenset[str]:
        """Every family's allocated annotation: most pods carry none, which one set look tells."""
        return frozenset(f.wire.allocated_annotation for f in self.members)

    def types(self) -> frozenset[str]:
        """The FamilyWire.type of every member: the device types that are not NVIDIA's."""
        return frozenset(f.wire.type for f in self.members)


def from_device_config(config: Mapping[str, Any]) -> Families:
    """Every family as HAMi's device-config.yaml configures it (the chart's defaults for a
    section the file leaves out), in the order of HAMi's InitDevicesWithConfig
    (pkg/scheduler/config): Cambricon, Hygon, Enflame (GCU, then VGCU), Moore Threads, MetaX
    (GPU, then sGPU), Kunlunxin (XPU, then vXPU), AWS Neuron, AMD, Vastai, Biren, then each
    Ascend chip (`vnpus`) and each Iluvatar chip (`iluvatars`); NVIDIA's is read apart.

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
