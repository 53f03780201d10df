"""Biren GPUs, as HAMi v2.10 schedules them (pkg/device/biren).

A count-only family: the device plugin registers its cards as a JSON list under
`hami.io/node-biren-register` (HAMi then sets every card's cores to 100), a container
asks for whole devices with `birentech.com/gpu`, and the common walk takes the first
that pass health, UUID selection, the split count and `mutex`. No memory or cores are
checked or recorded. HAMi declares use/nouse type annotations for Biren but never reads
them (its checkType compares the request's type only), so neither do we.
"""

from collections.abc import Mapping
from typing import Any

from hami.engine.families.base import FamilyResources, FamilyWire
from hami.engine.families.basic import CommonFamily, resources_from
from hami.engine.families.common import COUNT_ONLY, RequestRules

TYPE = "Biren"
RESOURCES = FamilyResources(count="birentech.com/gpu")


def wire(resources: FamilyResources = RESOURCES) -> FamilyWire:
    return FamilyWire(
        type=TYPE,
        vendor=TYPE,
        resources=resources,
        register_annotation="hami.io/node-biren-register",
        handshake_annotation="hami.io/node-handshake-biren",
        to_allocate_annotation=f"hami.io/{TYPE}-devices-to-allocate",
        allocated_annotation=f"hami.io/{TYPE}-devices-allocated",
        use_uuid="birentech.com/use-gpuuuid",
        nouse_uuid="birentech.com/nouse-gpuuuid",
    )


def from_config(section: Mapping[str, Any]) -> CommonFamily:
    """The family from the `biren` section of HAMi's device-config.yaml."""
    return CommonFamily(
        wire(resources_from(section, RESOURCES)),
        requests=RequestRules(),
        rules=COUNT_ONLY,
        form="json",
        devcore=100,
    )


FAMILY = from_config({})
