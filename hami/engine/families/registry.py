"""The one list of device families, and lookups by the names the wire carries.

Adding a family is one module under hami.engine.families, one entry in `configured`, its
tests and its chart values.
"""

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from hami.engine.families import (
    amd,
    ascend,
    awsneuron,
    biren,
    cambricon,
    configfile,
    enflame,
    hygon,
    iluvatar,
    kunlun,
    mthreads,
    vastai,
)
from hami.engine.families.base import Family, FastPath, OwnInventory
from hami.engine.families.metax.gpu import from_config as metax_gpu
from hami.engine.families.metax.sgpu import from_config as metax_sgpu
from hami.engine.families.nvidia.family import FAMILY as NVIDIA_FAMILY
from hami.engine.nvidianames import NVIDIA


@dataclass(frozen=True)
class Families:
    """The families one process schedules, in the order HAMi registers them (NVIDIA first).

    A decision asks every member (hami.engine.familyfit.fit_node): `fast`, those offering
    the FastPath capability, fit their asks of a pod whole; the rest (`walked_by_type`) are
    walked container by container. The wire's callers (annotations, quotas, binds) read
    NVIDIA's names apart and want `others`; none iterates `Families` itself, so that each
    says which it means."""

    members: tuple[Family, ...] = ()

    @cached_property
    def fast(self) -> tuple[FastPath, ...]:
        """The members offering FastPath, in HAMi's order."""
        return tuple(f for f in self.members if isinstance(f, FastPath))

    @cached_property
    def fast_types(self) -> frozenset[str]:
        """The type of each member offering FastPath."""
        return frozenset(f.wire.type for f in self.members if isinstance(f, FastPath))

    @cached_property
    def walked_by_type(self) -> Mapping[str, Family]:
        """The members without FastPath, by type: where hami.engine.familyfit walks their asks
        (a type of a FastPath family's must find none there)."""
        return {f.wire.type: f for f in self.members if not isinstance(f, FastPath)}

    @cached_property
    def inventory_owner(self) -> OwnInventory | None:
        """The first member offering OwnInventory, whose cards are a node's own
        (hami.engine.inventory): NVIDIA's."""
        return next((f for f in self.members if isinstance(f, OwnInventory)), None)

    @cached_property
    def carded(self) -> tuple[Family, ...]:
        """The members without OwnInventory, in HAMi's order: a node's registration of each
        is the cards its decode_node finds."""
        return tuple(f for f in self.members if not isinstance(f, OwnInventory))

    @cached_property
    def others(self) -> tuple[Family, ...]:
        """The members other than NVIDIA's, in HAMi's order."""
        return tuple(f for f in self.members if f.wire.type != NVIDIA)

    @cached_property
    def dra_drivers(self) -> Mapping[str, str]:
        """The family type of the cards each DRA driver publishes (FamilyWire.dra_drivers)."""
        return {d: f.wire.type for f in self.members for d in f.wire.dra_drivers}

    @cached_property
    def dra_unit_drivers(self) -> frozenset[str]:
        """The DRA drivers publishing `cores` in compute units (FamilyWire.dra_core_units)."""
        return frozenset(
            d for f in self.members if f.wire.dra_core_units for d in f.wire.dra_drivers
        )

    def by_type(self) -> Mapping[str, Family]:
        return {f.wire.type: f for f in self.members}

    def replacing(self, member: Family) -> "Families":
        """These families with `member` in the place of the one of its type: the composition
        root's NVIDIA, built with the run's resource names and core policy."""
        kind = member.wire.type
        if kind not in self.by_type():
            raise ValueError(f"no member of type {kind!r} to replace")
        return Families(tuple(member if f.wire.type == kind else f for f in self.members))

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


# The families HAMi's scheduler registers only when told to: its --enable-ascend and
# --enable-iluvatar, which its chart passes for devices.ascend.enabled and
# devices.iluvatar.enabled (false by default). Without them HAMi's webhook leaves their pods
# to the default scheduler and the vendor's own device plugin. By name (as in the flags), the
# section of HAMi's device-config.yaml that configures the family.
GATED = {"ascend": "vnpus", "iluvatar": "iluvatars"}


def configured(
    config: Mapping[str, Any], enabled: Collection[str] = GATED
) -> tuple[Families, tuple[str, ...]]:
    """Every family as HAMi's device-config.yaml configures it (the chart's defaults for a
    section the file leaves out), in the order of HAMi's InitDevicesWithConfig
    (pkg/scheduler/config): NVIDIA, Cambricon, Hygon, Enflame (GCU, then VGCU), Moore
    Threads, MetaX (GPU, then sGPU), Kunlunxin (XPU, then vXPU), AWS Neuron, AMD, Vastai,
    Biren, then each Ascend chip (`vnpus`) and each Iluvatar chip (`iluvatars`). NVIDIA's
    section is read apart (hami.runtime.deviceconfig checks it against serve's flags, which
    configure NVIDIA), so NVIDIA's member is the chart's default. Beside them, what the file
    says that changes nothing (hami.engine.families.configfile), and each family the file
    leaves without a count resource (no pod can ask for it: HAMi takes a given section as
    written, a name it leaves out as none).

    Of the GATED families, only those `enabled` names are members; the others' sections are
    still read and checked, so that turning one on later cannot reveal a broken file.

    Raises ValueError naming the section and field of a value HAMi would not read, and for
    two families given one resource name or one type."""
    unknown = sorted(set(enabled) - set(GATED))
    if unknown:
        raise ValueError(f"no gated family is named {', '.join(unknown)}: {', '.join(GATED)} are")
    notes = list(configfile.check(config))

    def section(name: str) -> Mapping[str, Any]:
        return config.get(name) or {}

    iluvatars = config.get(GATED["iluvatar"]) or [iluvatar.chart_section(c) for c in iluvatar.CHIPS]
    always = (
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
    )
    gated: dict[str, tuple[Family, ...]] = {
        "ascend": ascend.from_config(section(GATED["ascend"]) or ascend.DEFAULT_VNPUS),
        "iluvatar": iluvatar.from_config(iluvatars),
    }
    _distinct(Families((*always, *(f for fs in gated.values() for f in fs))))
    families = Families((*always, *(f for name in GATED if name in enabled for f in gated[name])))
    notes += [
        f"{f.wire.type}: the device config names no count resource; no pod can ask for it"
        for f in families.members
        if not f.wire.resources.count
    ]
    return families, tuple(notes)


def from_device_config(config: Mapping[str, Any], enabled: Collection[str] = GATED) -> Families:
    """The families of `configured`, without its notes."""
    return configured(config, enabled)[0]


def _distinct(families: Families) -> None:
    """Each resource name and type names one family: a pod's ask must say whose it is."""
    owner: dict[str, str] = {}
    types: set[str] = set()
    for family in families.members:
        kind = family.wire.type
        if kind in types:
            raise ValueError(f"two families of the device config are both {kind!r}")
        types.add(kind)
        for name in family.wire.resources.all():
            if owner.setdefault(name, kind) != kind:
                raise ValueError(f"resource {name} is named for both {owner[name]} and {kind}")


def _gated_members() -> Mapping[str, tuple[Family, ...]]:
    ungated = {f.wire.type for f in from_device_config({}, ()).members}
    return {
        name: tuple(
            f for f in from_device_config({}, (name,)).members if f.wire.type not in ungated
        )
        for name in GATED
    }


_GATED_MEMBERS = _gated_members()


def gated_members(name: str) -> tuple[Family, ...]:
    """The members a GATED family adds, as the chart's default device config configures
    them."""
    return _GATED_MEMBERS[name]


def enabling_flag(families: Families, annotations: Mapping[str, str]) -> str:
    """The flag (`--enable-<name>`) that schedules the gated family whose device plugin (as
    the chart configures it) registered a node with these annotations, where `families`
    leave that family out; "" where none did."""
    known = {f.wire.register_annotation for f in families.members}
    for name, members in _GATED_MEMBERS.items():
        keys = {f.wire.register_annotation for f in members} - known
        if any(k in annotations for k in keys):
            return f"--enable-{name}"
    return ""
