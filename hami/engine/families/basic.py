"""The family HAMi's common rules make, and the pieces families without a card list share.

`CommonFamily` is a whole family built of the common pieces (hami.engine.families.common)
with the family's options; a family that differs in one step subclasses it and states that
step. `capacity_cards` is HAMi's reading of a node whose device plugin registers no card
list, only extended resources in the node's capacity.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

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
from hami.engine.families.common import (
    Form,
    RequestRules,
    WalkRules,
    as_whole,
    claim_by_count,
    decode_registration,
    encode_allocation,
    read_request,
    room,
    walk,
)
from hami.engine.model import Card, ContainerDevices, DeviceInfo, PodDevices
from hami.engine.policy import NodePolicy


def capacity_of(node: NodeFacts, name: str) -> int | None:
    """A node's capacity of `name` as Go's AsInt64 reads it: 0 when the node reports
    none (or the caller knows no capacity), None when it is not a whole number."""
    if node.capacity is None or not name:
        return 0
    return as_whole(node.capacity.get(name, "0"))


def int32(n: int) -> int:
    """Go's int32(n) of an int64: the low 32 bits, signed."""
    return (n + 2**31) % 2**32 - 2**31


def capacity_cards(
    node: NodeFacts, resources: FamilyResources, word: str, per_card: int, kind: str
) -> tuple[DeviceInfo, ...] | None:
    """HAMi's cards of a family registered by capacity: one card per `per_card` of the
    node's core resource (rounded up), named `<node>-<word>-<index>`, split 100 ways, with
    `per_card` cores and an even share of the node's memory resource (in the family's
    units). None where the node reports no cores of the family."""
    cores = capacity_of(node, resources.cores)
    if not cores:
        return None
    memory = capacity_of(node, resources.memory) or 0
    # int64 arithmetic, then Go's int32 conversion of the per-card MiB.
    devmem = int32(memory * resources.memory_factor * per_card // cores) if cores > 0 else 0
    return tuple(
        DeviceInfo(f"{node.name}-{word}-{i}", i, 100, devmem, per_card, kind)
        for i in range(-(-cores // per_card))
    )


def index_suffix(uuid: str) -> int:
    """The card index a capacity-derived card id (`<node>-<word>-<index>`) ends with; the
    allocation annotation carries ids alone, so a family that writes the index reads it
    back from there (0 for an id of another form, as Go's zero value)."""
    tail = uuid.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def resources_from(
    section: Mapping[str, Any], defaults: FamilyResources, memory_factor: int = 1
) -> FamilyResources:
    """The resource names of a family's section of HAMi's device-config.yaml (its keys
    resourceCountName, resourceMemoryName and resourceCoreName); the chart's defaults when
    there is no section. A key a given section leaves out names no resource, as in HAMi,
    which takes the section's values as they are."""

    def name(key: str, default: str) -> str:
        if not section:
            return default
        return str(section.get(key) or "")

    return FamilyResources(
        count=name("resourceCountName", defaults.count),
        memory=name("resourceMemoryName", defaults.memory),
        cores=name("resourceCoreName", defaults.cores),
        memory_factor=memory_factor,
    )


COMMON_REQUESTS, COMMON_WALK = RequestRules(), WalkRules()


@dataclass(frozen=True, slots=True)
class CommonFamily:
    """A family that is HAMi's common rules throughout, with its own options: the card
    list from its registration annotation, the common request reader and walk, no node
    score, the allocation under both keys, claimed by a count limit. A family that
    differs in one step subclasses this and states that step."""

    wire: FamilyWire
    requests: RequestRules = COMMON_REQUESTS
    rules: WalkRules = COMMON_WALK
    form: Form = "any"
    # HAMi overwrites every registered card's cores with this ("only for calscore use").
    devcore: int | None = None

    def decode_node(
        self, annotations: Mapping[str, str], node: NodeFacts = NO_NODE
    ) -> tuple[DeviceInfo, ...] | None:
        cards = decode_registration(annotations, self.wire, self.form)
        if cards is None or self.devcore is None:
            return cards
        return tuple(replace(c, devcore=self.devcore) for c in cards)

    def container_request(
        self, container: Mapping[str, Any], *, strict: bool = False
    ) -> FamilyRequest | None:
        return read_request(container, self.wire, self.requests, strict=strict)

    def fit(
        self, cards: Sequence[Card], request: FamilyRequest, pod: FitPod, allocated: PodDevices
    ) -> FamilyFit:
        return walk(cards, request, pod, self.wire, self.rules)

    def room(self, card: Card, share: ContainerDevices) -> str | None:
        return room(card, share, self.rules)

    def score_node(self, cards: Sequence[Card], devices: PodDevices, policy: NodePolicy) -> float:
        return 0.0

    def annotations(self, devices: PodDevices, bind: BindContext = NO_BIND) -> dict[str, str]:
        return encode_allocation(self.wire, devices)

    def claim(self, container: Mapping[str, Any], pod: Mapping[str, Any]) -> Claim:
        return claim_by_count(container, self.wire)
