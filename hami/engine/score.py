"""Card and node scores exactly as HAMi v2.10 computes them (float32, weight 10).

HAMi v2.9-v2.10 compares the request's type ("NVIDIA") with the card model
("NVIDIA-Tesla T4"); they never match, so the request is never counted and a
card's score reflects existing usage only. Lab 14's logged `1.651042` (one
1000 MiB tenant on a 15360 MiB T4 split 10) and `0.000000` (idle card) are only
reproduced that way, and matching placements is the point of compatibility.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hami.engine.f32 import f32
from hami.engine.model import Card, DeviceInfo, Usage

WEIGHT = 10.0


@dataclass(frozen=True, slots=True)
class Weights:
    """`hami.io/device-scoring-weights`: slot, core and memory terms of the card score."""

    slot: int = 1
    core: int = 1
    memory: int = 1


DEFAULT_WEIGHTS = Weights()


def card_score(info: DeviceInfo, usage: Usage, weights: Weights = DEFAULT_WEIGHTS) -> float:
    if info.count == 0 or info.devcore == 0 or info.devmem == 0:
        return 0.0
    used = f32(f32(usage.used) / f32(info.count))
    core = f32(f32(usage.usedcores) / f32(info.devcore))
    mem = f32(f32(usage.usedmem) / f32(info.devmem))
    total = f32(
        f32(f32(weights.slot * used) + f32(weights.core * core)) + f32(weights.memory * mem)
    )
    return f32(WEIGHT * total)


def card_scores(cards: Sequence[Card], weights: Weights) -> tuple[float, ...]:
    """Every card's score, as logged for each container fitted."""
    if weights == DEFAULT_WEIGHTS:
        return tuple(c.score for c in cards)
    return tuple(card_score(c.info, c.usage, weights) for c in cards)


def make_card(info: DeviceInfo, usage: Usage = Usage(), untrusted: bool = False) -> Card:
    return Card(info, usage, card_score(info, usage), untrusted)


def node_score(cards: Iterable[Card]) -> float:
    """HAMi's NodeScore: usage ratios summed over all cards, before the new pod."""
    used = usedmem = usedcores = count = totalmem = totalcore = 0
    for c in cards:
        used += c.usage.used
        usedmem += c.usage.usedmem
        usedcores += c.usage.usedcores
        count += c.info.count
        totalmem += c.info.devmem
        totalcore += c.info.devcore
    if count == 0 or totalmem == 0 or totalcore == 0:
        return 0.0
    s = f32(f32(f32(used) / f32(count)) + f32(f32(usedcores) / f32(totalcore)))
    return f32(WEIGHT * f32(s + f32(f32(usedmem) / f32(totalmem))))
