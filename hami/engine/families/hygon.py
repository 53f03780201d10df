"""Hygon DCU (HAMi's pkg/device/hygon): HAMi's common rules, cores 100 unless asked.

A container asks `hygon.com/dcunum` cards, optionally `hygon.com/dcumem` MiB and
`hygon.com/dcucores` percent of each; without a memory ask it takes the whole card, without
a cores ask all of it (HAMi's default of 100 cores: a bare count is an exclusive card). The
checks are HAMi's common ones in its order, the node score is not changed (HAMi's ScoreNode
returns 0), and a bind writes the same list under both allocation annotations.
"""

from collections.abc import Mapping
from typing import Any

from hami.engine.families.base import FamilyResources, FamilyWire
from hami.engine.families.basic import CommonFamily, resources_from
from hami.engine.families.common import RequestRules

TYPE = "DCU"
# The DRA driver publishing DCUs (HYGON-AI/k8s-hcu-dra-driver), the name of HAMi-DRA's Hygon
# DeviceClass (docs/dra.md); its `cores` are the card's compute units, not a percent.
DRA_DRIVER = "dra.hygon.com"
RESOURCES = FamilyResources(
    count="hygon.com/dcunum", memory="hygon.com/dcumem", cores="hygon.com/dcucores"
)


def wire(resources: FamilyResources = RESOURCES) -> FamilyWire:
    return FamilyWire(
        type=TYPE,
        vendor=TYPE,  # HAMi's DeviceVendor for these cards (its CommonWord)
        resources=resources,
        register_annotation="hami.io/node-dcu-register",
        handshake_annotation="hami.io/node-handshake-dcu",
        to_allocate_annotation="hami.io/dcu-devices-to-allocate",
        allocated_annotation="hami.io/dcu-devices-allocated",
        use_type="hygon.com/use-dcutype",
        nouse_type="hygon.com/nouse-dcutype",
        use_uuid="hygon.com/use-gpuuuid",
        nouse_uuid="hygon.com/nouse-gpuuuid",
        dra_drivers=(DRA_DRIVER,),
        dra_core_units=True,
    )


def from_config(section: Mapping[str, Any]) -> CommonFamily:
    """The family from the `hygon` section of HAMi's device-config.yaml."""
    factor = int(section.get("memoryFactor") or 1) if section else 1
    return CommonFamily(
        wire(resources_from(section, RESOURCES, factor)),
        requests=RequestRules(default_cores=100, lenient_cores=True),
    )


HYGON = from_config({})
