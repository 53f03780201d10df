"""MetaX GPU: whole cards, one container each (HAMi's pkg/device/metax/device.go).

The device plugin registers no card list: HAMi counts the node's `metax-tech.com/gpu`
capacity and makes up one 64 GiB, 100-core card per unit, named after the node. A pod
takes whole cards; the node score comes from the link losses (binpack) or link scores
(spread) the device plugin writes on the node for each number of cards.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from hami.engine import reasons as r
from hami.engine.codec import CodecError
from hami.engine.f32 import f32
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
from hami.engine.families.basic import capacity_of
from hami.engine.families.common import (
    RequestRules,
    WalkRules,
    claim_by_count,
    encode_allocation,
    read_request,
    room,
    walk,
)
from hami.engine.families.metax.config import (
    DEFAULT,
    GPU_LOSSES,
    GPU_SCORES,
    GPU_TYPE,
    MetaxConfig,
)
from hami.engine.families.metax.topology import annotation_value
from hami.engine.model import Card, ContainerDevices, DeviceInfo, PodDevices
from hami.engine.policy import NodePolicy

WALK = WalkRules()
CARD_MEMORY = 65536  # MiB HAMi gives each card it makes up
# Cards one node may register: a capacity beyond it is refused, not turned into that many
# cards (HAMi has no bound).
MAX_CARDS = 1024
# What HAMi subtracts the topology value from, so a lower loss is a higher node score.
TOPOLOGY_BASE = 2000
# The node annotation the device plugin writes for each node policy: the link loss (binpack) or
# the link score (spread) per number of cards (a policy missing here is a KeyError, never
# another's score).
LINKS = {NodePolicy.BINPACK: GPU_LOSSES, NodePolicy.SPREAD: GPU_SCORES}


class MetaxGpu:
    """The exclusive MetaX GPU family (HAMi's `Metax-GPU` device type)."""

    def __init__(self, config: MetaxConfig = DEFAULT) -> None:
        self._wire = FamilyWire(
            type=GPU_TYPE,
            vendor=GPU_TYPE,
            resources=FamilyResources(count=config.gpu),
            register_annotation="",  # registered as node capacity
            handshake_annotation="",
            to_allocate_annotation="hami.io/metax-gpu-devices-to-allocate",
            allocated_annotation="hami.io/metax-gpu-devices-allocated",
            lock_name="",  # HAMi's LockNode for this type takes no lock
            node_reads=(GPU_LOSSES, GPU_SCORES),  # the node score's link losses and scores
        )

    @property
    def wire(self) -> FamilyWire:
        return self._wire

    def decode_node(
        self, annotations: Mapping[str, str], node: NodeFacts = NO_NODE
    ) -> tuple[DeviceInfo, ...] | None:
        """HAMi's GetNodeDevices: one card per unit of the count resource's capacity (no
        annotation registers these cards)."""
        count = capacity_of(node, self._wire.resources.count)
        if count is None or count <= 0:
            return None  # HAMi: no whole number, no cards
        if count > MAX_CARDS:
            raise CodecError(
                f"capacity {self._wire.resources.count} is {count}; at most {MAX_CARDS} cards"
            )
        return tuple(
            DeviceInfo(
                id=f"{node.name}-metax-{i}",
                index=i,
                count=1,
                devmem=CARD_MEMORY,
                devcore=100,
                type=GPU_TYPE,
                mode="",  # HAMi sets none
            )
            for i in range(count)
        )

    def container_request(
        self, container: Mapping[str, Any], *, strict: bool = False
    ) -> FamilyRequest | None:
        # Always the whole card: all its memory and all 100 cores.
        return read_request(container, self._wire, RequestRules(default_cores=100), strict=strict)

    def fit(
        self,
        cards: Sequence[Card],
        request: FamilyRequest,
        pod: FitPod,
        allocated: PodDevices,
    ) -> FamilyFit:
        taken = {d.uuid for container in allocated for d in container}

        def same_card(card: Card) -> str | None:
            # HAMi's customFilterRule: once an earlier container holds a card, only that card
            # may be given again, and it is held whole, so a second container asking for this
            # type never fits. HAMi's bug, kept: the answers must be HAMi's.
            if taken - {card.info.id}:
                return r.CARD_NOT_FOUND_CUSTOM_FILTER_RULE
            return None

        return walk(cards, request, pod, self._wire, WALK, same_card)

    def room(self, card: Card, share: ContainerDevices) -> str | None:
        return room(card, share, WALK)

    def score_node(self, cards: Sequence[Card], devices: PodDevices, policy: NodePolicy) -> float:
        # Without the node's annotations there is no topology to score.
        return 0.0

    def score_pod(
        self,
        cards: Sequence[Card],
        devices: PodDevices,
        pod: FitPod,
        node: NodeFacts,
        policy: NodePolicy,
    ) -> float:
        """HAMi's ScoreNode: 2000 less the link loss (binpack) or link score (spread) the
        device plugin wrote for the number of cards the pod took; 0 without the annotation.

        HAMi scores every family registered on the node, so a pod taking none of these
        cards still adds 2000 less the value for 0 cards (HAMi's quirk, kept)."""
        text = node.annotations.get(LINKS[policy])
        if text is None:
            return 0.0
        cards_taken = sum(len(container) for container in devices)
        return f32(TOPOLOGY_BASE - f32(annotation_value(text, cards_taken)))

    def annotations(self, devices: PodDevices, bind: BindContext = NO_BIND) -> dict[str, str]:
        return encode_allocation(self._wire, devices)

    def claim(self, container: Mapping[str, Any], pod: Mapping[str, Any]) -> Claim:
        return claim_by_count(container, self._wire)


def from_config(section: Mapping[str, Any]) -> MetaxGpu:
    """The exclusive GPU family from the `metax` section of HAMi's device-config.yaml."""
    return MetaxGpu(MetaxConfig.from_section(section))
