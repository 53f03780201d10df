"""AMD GPUs, as HAMi v2.10 schedules them (pkg/device/amd).

The device plugin registers its cards as a JSON list under `hami.io/node-amd-register`;
HAMi counts a node's AMD cards as healthy while the node reports the count resource in
its capacity. It differs from the common rules in what a device takes: a container asks
(in its limits alone) for devices, MiB per device and a percentage of each device's
compute units; no MiB means the whole card's memory, no percentage means all its CUs, and
the percentage becomes CUs of the card (at least one). Cards are selected by type
(`amd.com/use-gputype`, substrings) and UUID; the allocation names each card's model.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hami.engine.families.base import (
    NO_NODE,
    Claim,
    FamilyRequest,
    FamilyResources,
    FamilyWire,
    NodeFacts,
)
from hami.engine.families.basic import CommonFamily, resources_from
from hami.engine.families.common import RequestRules, WalkRules, as_whole
from hami.engine.model import DeviceInfo

TYPE = "AMD"
RESOURCES = FamilyResources(count="amd.com/gpu", memory="amd.com/gpumem", cores="amd.com/gpucores")


def wire(resources: FamilyResources = RESOURCES) -> FamilyWire:
    return FamilyWire(
        type=TYPE,
        vendor=TYPE,
        resources=resources,
        register_annotation="hami.io/node-amd-register",
        handshake_annotation="",  # health is read from the node's capacity instead
        to_allocate_annotation="hami.io/amd-devices-to-allocate",
        allocated_annotation="hami.io/amd-devices-allocated",
        use_type="amd.com/use-gputype",
        nouse_type="amd.com/nouse-gputype",
        use_uuid="amd.com/use-gpu-uuid",
        nouse_uuid="amd.com/nouse-gpu-uuid",
        # The AMD Container Toolkit's runtime mounts the GPUs this names.
        device_env=("AMD_VISIBLE_DEVICES",),
        # HAMi's AMD device plugin holds a container to its GPUs and compute units with these
        # (HAMi's docs/develop/amd-vgpu.md); the mask's indexes follow ROCR_VISIBLE_DEVICES.
        share_env=("ROCR_VISIBLE_DEVICES", "HSA_CU_MASK", "HIP_DEVICE_MEMORY_LIMIT"),
    )


def memory(card: DeviceInfo, request: FamilyRequest) -> int:
    """MiB asked, or the whole card's when none is (and the card registers any)."""
    if request.memreq <= 0 and card.devmem > 0:
        return card.devmem
    return request.memreq


def compute_units(card: DeviceInfo, request: FamilyRequest) -> int:
    """The CUs a percentage takes of the card: at least one, at most all. A card that
    registers no CUs cannot take a percentage (HAMi: CardInsufficientCore), which the
    walk's core check gives for any positive amount there."""
    if request.coresreq > 0:
        if card.devcore <= 0:
            return 1
        return min(max(card.devcore * request.coresreq // 100, 1), card.devcore)
    if card.devmem > 0 and memory(card, request) >= card.devmem:
        return card.devcore  # the whole card's memory takes its CUs too
    return 0


RULES = WalkRules(
    exclusive_full_core=False,
    core_exhausted=False,
    memory=memory,
    core_amount=compute_units,
    card_type=True,
)
REQUESTS = RequestRules(
    default_cores=100, whole_when_no_memory=False, limits_only=True, cores_range=(1, 100)
)


@dataclass(frozen=True, slots=True)
class Amd(CommonFamily):
    def decode_node(
        self, annotations: Mapping[str, str], node: NodeFacts = NO_NODE
    ) -> tuple[DeviceInfo, ...] | None:
        """HAMi's CheckHealth: without the count resource in the node's capacity (or with
        none of it) the node's cards are dropped, as HAMi removes them."""
        cards = CommonFamily.decode_node(self, annotations, node)
        if cards is not None and node.capacity is not None:
            count = as_whole(node.capacity.get(self.wire.resources.count, "0"))
            if not count:
                return ()
        return cards

    def claim(self, container: Mapping[str, Any], pod: Mapping[str, Any]) -> Claim:
        """Claimed when any of the three resources is a limit; a core percentage beside a
        count must be a whole number from 1 to 100, or the pod is refused."""
        names = self.wire.resources
        limits = (container.get("resources") or {}).get("limits") or {}
        if names.count in limits:
            if names.cores in limits:
                pct = as_whole(limits[names.cores])
                if pct is None or not 1 <= pct <= 100:
                    return Claim(
                        False,
                        error=f"{names.cores} must be an integer percentage between 1 and 100",
                    )
            return Claim(True)
        return Claim(any(n and n in limits for n in (names.memory, names.cores)))


def from_config(section: Mapping[str, Any]) -> Amd:
    """The family from the `amd` section of HAMi's device-config.yaml."""
    return Amd(
        wire(resources_from(section, RESOURCES)), requests=REQUESTS, rules=RULES, form="json"
    )


FAMILY = from_config({})
