"""Vastai accelerators, as HAMi v2.10 schedules them (pkg/device/vastai).

Count-only (JSON registration under `hami.io/node-va-register`, cores set to
100, nothing but the split count and `mutex` decide), with one mode of its own: when the
device plugin registers dies rather than cards (`custominfo.DeviceStrategy: "die"` on the
first card, `custominfo.AIC` naming the physical card a die sits on), HAMi collects every
die that passes, prefers the physical cards holding most of them, and scores a node by how
few physical cards a container spans. Under `mutex` a die whose physical card has another
die in use is refused too.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami.engine import reasons as r
from hami.engine.f32 import f32
from hami.engine.families.base import FamilyFit, FamilyRequest, FamilyResources, FamilyWire, FitPod
from hami.engine.families.basic import CommonFamily, resources_from
from hami.engine.families.common import COUNT_ONLY, card_verdict, taken
from hami.engine.model import Card, ContainerDevice, PodDevices
from hami.engine.policy import NodePolicy

TYPE = "Vastai"
RESOURCES = FamilyResources(count="vastaitech.com/va")
STRATEGY, AIC, DIE = "DeviceStrategy", "AIC", "die"


def wire(resources: FamilyResources = RESOURCES) -> FamilyWire:
    return FamilyWire(
        type=TYPE,
        vendor=TYPE,
        resources=resources,
        register_annotation="hami.io/node-va-register",
        handshake_annotation="hami.io/node-handshake-va",
        to_allocate_annotation=f"hami.io/{TYPE}-devices-to-allocate",
        allocated_annotation=f"hami.io/{TYPE}-devices-allocated",
        use_uuid="vastaitech.com/use-gpuuuid",
        nouse_uuid="vastaitech.com/nouse-gpuuuid",
    )


def die_mode(cards: Sequence[Card]) -> bool:
    """HAMi asks the first card of the sorted list alone."""
    return bool(cards) and cards[0].info.custom_value(STRATEGY) == DIE


@dataclass(frozen=True, slots=True)
class Vastai(CommonFamily):
    def fit(
        self, cards: Sequence[Card], request: FamilyRequest, pod: FitPod, allocated: PodDevices
    ) -> FamilyFit:
        if not die_mode(cards):
            return CommonFamily.fit(self, cards, request, pod, allocated)
        occupied = {c.info.custom_value(AIC) for c in cards if pod.mutex and c.usage.used > 0} - {
            None
        }
        counts: dict[str, int] = {}
        passed: list[ContainerDevice] = []
        aics: list[str | None] = []
        for card in reversed(cards):
            why = card_verdict(card, request, pod, self.wire, self.rules)
            if why is None and card.info.custom_value(AIC) in occupied:
                why = r.EXCLUSIVE_CONFLICT  # an idle die on a physical card in use
            if why is not None:
                counts[why] = counts.get(why, 0) + 1
                continue
            passed.append(taken(card.info, request, self.wire, self.rules))
            aics.append(card.info.custom_value(AIC))
        if len(passed) == request.nums:
            return FamilyFit(tuple(passed))
        if len(passed) > request.nums:
            if request.nums == 1:
                return FamilyFit((passed[0],))
            return FamilyFit(best_combination(request.nums, passed, aics))
        if passed:
            counts[r.ALLOCATED_CARDS_INSUFFICIENT] = len(passed)
        return FamilyFit(None, r.card_reasons(counts, len(cards)))

    def score_node(self, cards: Sequence[Card], devices: PodDevices, policy: NodePolicy) -> float:
        """Per container, the share of its dies on its most used physical card (1 when all
        sit on one); 0 for the node as soon as one die is not a die-mode die with an AIC."""
        custom = {c.info.id: c.info for c in cards}
        score = 0.0
        for container in devices:
            per_aic: dict[str, int] = {}
            for d in container:
                info = custom.get(d.uuid)
                if info is None or not info.custom:
                    return 0.0
                strategy, aic = info.custom_value(STRATEGY), info.custom_value(AIC)
                if (strategy is not None and strategy != DIE) or aic is None:
                    return 0.0
                per_aic[aic] = per_aic.get(aic, 0) + 1
            if per_aic:
                score = f32(score + f32(max(per_aic.values()) / sum(per_aic.values())))
        return score


def best_combination(
    nums: int, passed: Sequence[ContainerDevice], aics: Sequence[str | None]
) -> tuple[ContainerDevice, ...]:
    """HAMi's computeBestCombination: the dies grouped by physical card, the cards holding
    most dies first. HAMi orders cards of equal count as Go's map happens to iterate; we
    take them in the order their first die was met (see the deliberate differences). Dies
    without an AIC are left out, so, as in HAMi, fewer than `nums` may come back."""
    groups: dict[str, list[ContainerDevice]] = {}
    for device, aic in zip(passed, aics, strict=True):
        if aic is not None:
            groups.setdefault(aic, []).append(device)
    ordered = sorted(groups.values(), key=len, reverse=True)  # stable, as SliceStable
    return tuple(d for group in ordered for d in group)[:nums]


def from_config(section: Mapping[str, Any]) -> Vastai:
    """The family from the `vastai` section of HAMi's device-config.yaml."""
    return Vastai(
        wire(resources_from(section, RESOURCES)), rules=COUNT_ONLY, form="json", devcore=100
    )


FAMILY = from_config({})
