"""Iluvatar GPUs, as HAMi v2.10 schedules them (pkg/device/iluvatar).

HAMi makes one family of each chip the `iluvatars` list of its device-config.yaml names
(MR-V100, MR-V50, BI-V150, BI-V100 in the chart), each with its own resources, its own
annotations (named after the chip's `commonWord`) and its own cards: the device plugin
registers each chip's cards in the `:`-separated form under `hami.io/node-<word>-register`.
Requests, fit and annotations are the common ones (memory in units of 256 MiB, no cores
by default). HAMi's scheduler only loads these families when started with
`--enable-iluvatar` (the chart's `devices.iluvatar.enabled`).

The webhook gives a container that asks for several devices all cores of each (its core
limit becomes 100 per device) and names the container in `SOL_CONTINER_NAME`.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami.engine.families.base import Claim, FamilyResources, FamilyWire
from hami.engine.families.basic import CommonFamily, resources_from
from hami.engine.families.common import RequestRules, quantity_value

MEMORY_FACTOR = 256  # one vMem unit is 256 MiB
CHIPS = ("MR-V100", "MR-V50", "BI-V150", "BI-V100")  # the chart's `iluvatars`, in its order
# HAMi's spelling, kept: the runtime reads this name.
CONTAINER_NAME_ENV = "SOL_CONTINER_NAME"


def chip_resources(chip: str) -> FamilyResources:
    return FamilyResources(
        count=f"iluvatar.ai/{chip}-vgpu",
        memory=f"iluvatar.ai/{chip}.vMem",
        cores=f"iluvatar.ai/{chip}.vCore",
        memory_factor=MEMORY_FACTOR,
    )


def wire(word: str, resources: FamilyResources) -> FamilyWire:
    return FamilyWire(
        type=word,
        vendor=word,
        resources=resources,
        register_annotation=f"hami.io/node-{word}-register",
        handshake_annotation=f"hami.io/node-handshake-{word}",
        to_allocate_annotation=f"hami.io/{word}-devices-to-allocate",
        allocated_annotation=f"hami.io/{word}-devices-allocated",
        use_uuid=f"hami.io/use-{word}-uuid",
        nouse_uuid=f"hami.io/no-use-{word}-uuid",
    )


@dataclass(frozen=True, slots=True)
class Iluvatar(CommonFamily):
    def claim(self, container: Mapping[str, Any], pod: Mapping[str, Any]) -> Claim:
        names = self.wire.resources
        limits = (container.get("resources") or {}).get("limits") or {}
        if names.count not in limits:
            return Claim(False)
        count = quantity_value(limits[names.count])
        # HAMi writes the core limit even when the config names no core resource.
        set_limits = ((names.cores, str(count * 100)),) if count > 1 else ()
        name = str(container.get("name") or "")
        has_env = any(e.get("name") == CONTAINER_NAME_ENV for e in container.get("env") or ())
        env = ((CONTAINER_NAME_ENV, name),) if name and not has_env else ()
        return Claim(True, limits=set_limits, env=env)


def family(section: Mapping[str, Any]) -> Iluvatar:
    """One chip's family from its entry of the `iluvatars` list."""
    word = str(section.get("commonWord") or "")
    chip = str(section.get("chipName") or word)
    return Iluvatar(
        wire(word, resources_from(section, chip_resources(chip), MEMORY_FACTOR)),
        requests=RequestRules(lenient_cores=True),
        form="legacy",
    )


def from_config(sections: Sequence[Mapping[str, Any]]) -> tuple[Iluvatar, ...]:
    """The families of the `iluvatars` list of HAMi's device-config.yaml."""
    return tuple(family(s) for s in sections)


def chart_section(chip: str) -> dict[str, str]:
    """The chart's entry of `iluvatars` for a chip."""
    names = chip_resources(chip)
    return {
        "chipName": chip,
        "commonWord": chip,
        "resourceCountName": names.count,
        "resourceMemoryName": names.memory,
        "resourceCoreName": names.cores,
    }


FAMILIES = from_config([chart_section(c) for c in CHIPS])
