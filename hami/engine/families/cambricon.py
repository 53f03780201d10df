"""Cambricon MLUs, as HAMi v2.10 schedules them (pkg/device/cambricon).

Cambricon's device plugin registers no card list: HAMi derives a node's cards from its
capacity, one card per 100 `mlu.smlu.vcore` (named `<node>-cambricon-mlu-<i>`, split 100
ways, 100 cores each), the node's `mlu.smlu.vmemory` shared evenly among them. Requests
count memory in units of 256 MiB and take all 100 cores of a device unless they name
fewer; the fit is the common walk. The bind also tells the plugin which profile to make
(`CAMBRICON_DSMLU_PROFILE`: card index, cores, memory units) and that it has not made it
yet (`CAMBRICON_DSMLU_ASSIGNED`). HAMi's node lock for this family is its own annotation,
`cambricon.com/dsmlu.lock`, holding a bare RFC 3339 time that expires after 2 minutes.
HAMi also refuses a card here when the namespace's ResourceQuota would be exceeded
(ResourceQuotaNotFit); that check is the quota module's, not this family's.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hami.engine.families.base import (
    NO_BIND,
    NO_NODE,
    BindContext,
    FamilyResources,
    FamilyWire,
    NodeFacts,
)
from hami.engine.families.basic import (
    CommonFamily,
    capacity_cards,
    index_suffix,
    resources_from,
)
from hami.engine.families.common import RequestRules
from hami.engine.model import DeviceInfo, PodDevices

TYPE = "MLU"
MEMORY_FACTOR = 256  # one vmemory unit is 256 MiB
RESOURCES = FamilyResources(
    count="cambricon.com/vmlu",
    memory="cambricon.com/mlu.smlu.vmemory",
    cores="cambricon.com/mlu.smlu.vcore",
    memory_factor=MEMORY_FACTOR,
)
PROFILE, ASSIGNED = "CAMBRICON_DSMLU_PROFILE", "CAMBRICON_DSMLU_ASSIGNED"


def wire(resources: FamilyResources = RESOURCES) -> FamilyWire:
    return FamilyWire(
        type=TYPE,
        vendor=TYPE,
        resources=resources,
        register_annotation="",  # the cards come from the node's capacity
        handshake_annotation="",  # HAMi's CheckHealth is always healthy here
        to_allocate_annotation="hami.io/cambricon-mlu-devices-to-allocate",
        allocated_annotation="hami.io/cambricon-mlu-devices-allocated",
        lock_name="cambricon.com/dsmlu.lock",
        lock_expiry_seconds=120,  # HAMi's LockNode: "locked within 2 minutes"
        use_uuid="cambricon.com/use-gpuuuid",
        nouse_uuid="cambricon.com/nouse-gpuuuid",
    )


@dataclass(frozen=True, slots=True)
class Cambricon(CommonFamily):
    def decode_node(
        self, annotations: Mapping[str, str], node: NodeFacts = NO_NODE
    ) -> tuple[DeviceInfo, ...] | None:
        return capacity_cards(node, self.wire.resources, "cambricon-mlu", 100, TYPE)

    def annotations(self, devices: PodDevices, bind: BindContext = NO_BIND) -> dict[str, str]:
        out = CommonFamily.annotations(self, devices, bind)
        first = next((c[0] for c in devices if c), None)
        if first is not None:
            out[ASSIGNED] = "false"
            units = int(first.usedmem / MEMORY_FACTOR)  # Go's int32 division
            out[PROFILE] = f"{index_suffix(first.uuid)}_{first.usedcores}_{units}"
        return out


def from_config(section: Mapping[str, Any]) -> Cambricon:
    """The family from the `cambricon` section of HAMi's device-config.yaml."""
    return Cambricon(
        wire(resources_from(section, RESOURCES, MEMORY_FACTOR)),
        requests=RequestRules(default_cores=100, lenient_cores=True),
    )


FAMILY = from_config({})
