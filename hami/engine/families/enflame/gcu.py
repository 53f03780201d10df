"""Whole Enflame GCUs (HAMi v2.10's pkg/device/enflame/gcu.go)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami.engine import reasons as r
from hami.engine.families.base import (
    NO_NODE,
    FamilyFit,
    FamilyRequest,
    FitPod,
    NodeFacts,
)
from hami.engine.families.basic import CommonFamily, capacity_of
from hami.engine.families.common import WalkRules, lookup, over
from hami.engine.model import Card, ContainerDevice, DeviceInfo, PodDevices, Usage
from hami.engine.policy import filtered_out
from hami.engine.quantity import QuantityError, as_int64
from hami.engine.requests import RequestError

WHOLE = "GCU"


@dataclass(frozen=True, slots=True)
class WholeGcuFamily(CommonFamily):
    """Whole GCUs (HAMi's GCUDevices): a card per unit of the node's capacity, one
    container per card. No node score, the allocation under both keys, claimed by a
    count limit: HAMi's common rules there."""

    def decode_node(
        self, annotations: Mapping[str, str], node: NodeFacts = NO_NODE
    ) -> tuple[DeviceInfo, ...] | None:
        units = capacity_of(node, self.wire.resources.count)
        if not units or units < 0:
            return None  # HAMi also calls such a node unhealthy for the family
        return tuple(
            DeviceInfo(f"{node.name}-{WHOLE}-{i}", i, 1, 100, 100, WHOLE) for i in range(units)
        )

    def container_request(
        self, container: Mapping[str, Any], *, strict: bool = False
    ) -> FamilyRequest | None:
        name = self.wire.resources.count
        raw = lookup(container.get("resources") or {}, name)
        if raw is None:
            return None
        try:
            nums = as_int64(raw)
        except QuantityError:
            nums = None
        if nums is None or nums < 0:
            if strict:
                raise RequestError(f"container {container.get('name', '?')}: {name} {raw!r}")
            return None
        # HAMi records a whole GCU as 100 of its 100 "MiB" and 100 cores.
        return FamilyRequest(WHOLE, nums, 100, 100, 100) if nums else None

    def fit(
        self, cards: Sequence[Card], request: FamilyRequest, pod: FitPod, allocated: PodDevices
    ) -> FamilyFit:
        """HAMi's GCU Fit: healthy idle cards from the tail; a used one is a conflict. (An idle
        card holds the whole GCU asked; the room rule, which /bind asks again, says so.)"""
        counts: dict[str, int] = {}
        picked: list[ContainerDevice] = []
        for card in reversed(cards):
            device = ContainerDevice(card.info.id, request.memreq, request.coresreq, WHOLE)
            why = (
                r.CARD_NOT_HEALTH
                if not card.healthy
                else r.EXCLUSIVE_CONFLICT
                if card.usage.used > 0
                else filtered_out(pod.filters, card.usage.used) or _full(card, device, self.rules)
            )
            if why is not None:
                counts[why] = counts.get(why, 0) + 1
                continue
            picked.append(device)
            if len(picked) == request.nums:
                return FamilyFit(tuple(picked))
        if picked:
            counts[r.ALLOCATED_CARDS_INSUFFICIENT] = len(picked)
        return FamilyFit(None, r.card_reasons(counts, len(cards)))


def _full(card: Card, device: ContainerDevice, rules: WalkRules) -> str | None:
    """The room rule's reason where the card, `device` counted, would hold more than it has."""
    got = over(card.info, card.usage + Usage(1, device.usedmem, device.usedcores), (device,), rules)
    return None if got is None else got.reason
