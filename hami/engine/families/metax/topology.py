"""MetaLink topology: which whole cards to give one container, and how well a node links
the cards a pod took (HAMi's score.go, prioritizeExclusiveDevices, scoreExclusiveDevices,
and the GPU's topology annotations).

A card's link zone is the MetaLink group its device plugin reports; 0 (or less) is a card
on no MetaLink. Two distinct cards in the same positive zone score DIRECT_LINK.
"""

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import orjson

DIRECT_LINK = 10

T = TypeVar("T")

# A card as the scoring sees it: its id and its link zone.
Linked = tuple[str, int]


def link_score(cards: Sequence[Linked]) -> int:
    """The sum over every pair of the cards (HAMi's LinkDevices.Score)."""
    total = 0
    for i, (a, zone_a) in enumerate(cards):
        for b, zone_b in cards[i + 1 :]:
            if a != b and zone_a != 0 and zone_b != 0 and zone_a == zone_b:
                total += DIRECT_LINK
    return total


def prioritize_whole(candidates: Sequence[T], need: int, zone: dict[int, int]) -> list[T]:
    """Which `need` of the candidates (in walk order) a container asking for whole cards
    takes: all inside the smallest MetaLink zone that holds them, else zone by zone from the
    smallest, then cards on no MetaLink.

    `zone` maps a candidate's position to its link zone. HAMi groups the zones in a Go map
    and sorts the groups by size with an unstable sort, so between zones of one size its
    choice is random; here the zone met first in walk order goes first (deliberate)."""
    if len(candidates) <= need:
        return list(candidates)
    groups: dict[int, list[int]] = {}
    unlinked: list[int] = []
    for i in range(len(candidates)):
        z = zone[i]
        if z <= 0:
            unlinked.append(i)
        else:
            groups.setdefault(z, []).append(i)
    # sorted() is stable: zones of one size keep the order they were first met in.
    ordered = sorted(groups.values(), key=len)
    for members in ordered:
        if len(members) >= need:
            return [candidates[i] for i in members[:need]]
    picked = [i for members in ordered for i in members] + unlinked
    return [candidates[i] for i in picked[:need]]


def whole_card_score(taken: Iterable[Linked], before: Iterable[tuple[Linked, bool]]) -> int:
    """How well the pod's whole cards are linked, less the links it breaks among the free
    cards it leaves (HAMi's scoreExclusiveDevices).

    `taken`: the cards the pod took whole; `before`: every card of the node with whether it
    was free (unused) before the pod."""
    allocated = list(taken)
    mine = {card for card, _ in allocated}
    available = [card for card, free in before if free]
    rest = [card for card in available if card[0] not in mine]
    allocated_score = link_score(allocated)
    loss = link_score(available) - allocated_score - link_score(rest)
    return 10 * allocated_score - loss


def annotation_value(text: str, cards: int) -> int:
    """The value for `cards` in a GPU topology annotation (`{"1": 0, "2": 10, ...}`).

    0 where the text is not such an object or has no entry for `cards`, as HAMi's
    parseMetaxAnnos answers (it only logs)."""
    try:
        parsed: Any = orjson.loads(text)
    except orjson.JSONDecodeError:
        return 0
    if parsed is None:
        return 0
    if not isinstance(parsed, dict):
        return 0
    found = 0
    for key, value in parsed.items():
        number = _go_int_key(key)
        if number is None:
            return 0  # Go refuses the whole object
        if value is None:
            value = 0
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**63:
            return 0
        if number == cards:
            found = value  # Go keeps the last of keys that read as one number
    return found


def _go_int_key(key: str) -> int | None:
    """A JSON object key as Go reads it into an int map key (strconv.ParseInt, base 10)."""
    body = key[1:] if key[:1] in "+-" else key
    if not body or not body.isascii() or not body.isdigit():
        return None
    number = int(key)
    return number if -(2**63) <= number < 2**63 else None
