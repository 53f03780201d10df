"""Moore Threads GPUs, as HAMi v2.10 schedules them (pkg/device/mthreads).

Like Cambricon's, Moore Threads' device plugin registers no card list: HAMi derives one
card per 16 `sgpu-core` of the node's capacity (`<node>-mthreads-<i>`, split 100 ways,
16 cores each) and shares the node's `sgpu-memory` (units of 512 MiB) among them. A
container's memory and cores are asked for the container and split evenly over its
devices; all the devices of a pod must be one card (HAMi's custom filter rule). The
webhook turns a count of several devices into whole cards (16 cores and 96 units each),
gives a single device without memory a whole card too, and refuses memory sizes the sGPU
cannot make. The bind names the card indexes and the node for the device plugin; HAMi
takes no node lock for this family and keeps no handshake.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami.engine import reasons as r
from hami.engine.families.base import (
    NO_BIND,
    NO_NODE,
    BindContext,
    Claim,
    FamilyFit,
    FamilyRequest,
    FamilyResources,
    FamilyWire,
    FitPod,
    NodeFacts,
)
from hami.engine.families.basic import (
    CommonFamily,
    capacity_cards,
    index_suffix,
    resources_from,
)
from hami.engine.families.common import (
    RequestRules,
    as_whole,
    encode_allocation,
    quantity_value,
    walk,
)
from hami.engine.families.common import lookup as lookup_resource
from hami.engine.model import Card, DeviceInfo, PodDevices

TYPE = "Mthreads"
MEMORY_FACTOR = 512  # one sgpu-memory unit is 512 MiB
CORES_PER_GPU, MEMORY_PER_GPU = 16, 96  # a whole card, in cores and memory units
LEGAL_MEMORY = (2, 4, 8, 16, 32, 64, 96)
RESOURCES = FamilyResources(
    count="mthreads.com/vgpu",
    memory="mthreads.com/sgpu-memory",
    cores="mthreads.com/sgpu-core",
    memory_factor=MEMORY_FACTOR,
)
GPU_INDEX = "mthreads.com/gpu-index"
PREDICATE_NODE, PREDICATE_TIME = "mthreads.com/predicate-node", "mthreads.com/predicate-time"
REQUEST_GPU_NUM = "mthreads.com/request-gpu-num"


def wire(resources: FamilyResources = RESOURCES) -> FamilyWire:
    return FamilyWire(
        type=TYPE,
        vendor=TYPE,
        resources=resources,
        register_annotation="",  # the cards come from the node's capacity
        handshake_annotation="",
        # HAMi registers this key for the family but its bind never writes it.
        to_allocate_annotation="hami.io/mthreads-vgpu-devices-to-allocate",
        allocated_annotation="hami.io/mthreads-vgpu-devices-allocated",
        lock_name="",  # HAMi's LockNode is a no-op here
        use_uuid="mthreads.ai/use-gpuuuid",
        nouse_uuid="mthreads.ai/nouse-gpuuuid",
        # The MT Container Toolkit's runtime (`--runtime mthreads`) mounts the GPUs this names.
        device_env=("MTHREADS_VISIBLE_DEVICES",),
    )


@dataclass(frozen=True, slots=True)
class Mthreads(CommonFamily):
    def decode_node(
        self, annotations: Mapping[str, str], node: NodeFacts = NO_NODE
    ) -> tuple[DeviceInfo, ...] | None:
        return capacity_cards(node, self.wire.resources, "mthreads", CORES_PER_GPU, TYPE)

    def fit(
        self, cards: Sequence[Card], request: FamilyRequest, pod: FitPod, allocated: PodDevices
    ) -> FamilyFit:
        # HAMi reads this from the pod's earlier containers only, so two devices of one
        # container may still be two cards.
        held = {d.uuid for container in allocated for d in container}

        def one_card(card: Card) -> str | None:
            if held - {card.info.id}:
                return r.CARD_NOT_FOUND_CUSTOM_FILTER_RULE
            return None

        return walk(cards, request, pod, self.wire, self.rules, one_card)

    def annotations(self, devices: PodDevices, bind: BindContext = NO_BIND) -> dict[str, str]:
        allocation = encode_allocation(self.wire, devices)
        if not allocation:
            return {}
        out = {self.wire.allocated_annotation: allocation[self.wire.allocated_annotation]}
        last = [c for c in devices if c]
        if last:  # HAMi overwrites it per container: the last one's indexes stand
            out[GPU_INDEX] = ",".join(str(index_suffix(d.uuid)) for d in last[-1])
            out[PREDICATE_TIME] = str(bind.now_ns)
            out[PREDICATE_NODE] = bind.node
        return out

    def claim(self, container: Mapping[str, Any], pod: Mapping[str, Any]) -> Claim:
        names = self.wire.resources
        resources = container.get("resources") or {}
        raw = lookup_resource(resources, names.count)
        if raw is None:
            return Claim(False)
        count = quantity_value(raw)
        if count <= 0:
            return Claim(False, error=f"{names.count} must be greater than 0")
        whole_cards = (
            (names.cores, str(count * CORES_PER_GPU)),
            (names.memory, str(count * MEMORY_PER_GPU)),
        )
        if count > 1:
            return Claim(True, limits=whole_cards, annotations=((REQUEST_GPU_NUM, str(count)),))
        limits = resources.get("limits") or {}
        if names.memory not in limits:
            return Claim(True, limits=whole_cards)
        if as_whole(limits[names.memory]) not in LEGAL_MEMORY:
            return Claim(
                True,
                error="sGPU memory request value is invalid, valid values are "
                "[2, 4, 8, 16, 32, 64, 96]",
            )
        return Claim(True)


def from_config(section: Mapping[str, Any]) -> Mthreads:
    """The family from the `mthreads` section of HAMi's device-config.yaml."""
    return Mthreads(
        wire(resources_from(section, RESOURCES, MEMORY_FACTOR)),
        requests=RequestRules(lenient_cores=True, per_device_split=True),
    )


FAMILY = from_config({})
