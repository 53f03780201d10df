"""Enflame's DRS profiles and capacity annotation, read as HAMi v2.10 reads them.

The plugin writes `enflame.com/gcu-drs-capacity`: each card's slice capacity, and the
profiles a card can be cut into, named `<slices>g.<GB>gb` (e.g. `3g.20gb`) with their ids.
"""

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from hami.engine.codec import CodecError, go_keys
from hami.engine.families.base import FamilyRequest
from hami.engine.model import Card, DeviceInfo
from hami.engine.requests import INT32_MAX

DRS = "Enflame"
CAPACITY = "enflame.com/gcu-drs-capacity"  # node: the plugin's cards and DRS profiles
# How a DRS request names its share (HAMi keeps it in the request's memory percentage).
BY_SLICES = 0  # memreq is the profile's slice count
BY_SPEC = -1  # memreq is memory (GB, or MiB when over twice the largest profile) and cores
_GO_INT = re.compile(r"[+-]?[0-9]+")


def atoi(text: str) -> int | None:
    """Go's strconv.Atoi: an optional sign and digits, nothing else."""
    return int(text) if _GO_INT.fullmatch(text) else None


def profile_shape(name: str) -> tuple[int, int]:
    """HAMi's parseProfile: `3g.20gb` is (3 slices, 20 GB); (0, 0) or (n, 0) when unreadable."""
    parts = name.strip().lower().split(".")
    if len(parts) < 2:
        return 0, 0
    size = atoi(parts[0].strip().removesuffix("g"))
    if size is None:
        return 0, 0
    memory = atoi(parts[1].strip().removesuffix("gb"))
    return size, memory or 0


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    id: str
    size: int  # slices
    memory_gb: int
    cores: int  # the slices' share of the card, rounded up


def profiles(cards: Sequence[Card]) -> list[Profile]:
    """HAMi's collectDRSProfiles: every readable profile of the node's cards, smallest first
    (by slices, then memory; then name, where HAMi's order is unspecified)."""
    slices = max((atoi(c.info.custom_value("maxSlice") or "") or 0 for c in cards), default=0)
    if slices <= 0:
        slices = max((profile_shape(n)[0] for c in cards for n in _profiles_of(c.info)), default=0)
    if slices <= 0:
        return []
    seen: dict[str, Profile] = {}
    for card in cards:
        for name, ident in _profiles_of(card.info).items():
            size, memory = profile_shape(name)
            if size > 0 and memory > 0:
                seen[name] = Profile(name, ident, size, memory, math.ceil(size * 100 / slices))
    return sorted(seen.values(), key=lambda p: (p.size, p.memory_gb, p.name))


def _profiles_of(card: DeviceInfo) -> dict[str, str]:
    text = card.custom_value("profiles")
    return dict(orjson.loads(text)) if text else {}


def choose(cards: Sequence[Card], request: FamilyRequest) -> Profile | None:
    """HAMi's selectProfileByRequest: the profile of the slices asked, or the smallest with
    the memory and cores asked."""
    candidates = profiles(cards)
    if not candidates:
        return None
    if request.mem_percentage == BY_SLICES:
        return next((p for p in candidates if p.size == request.memreq), None)
    largest = candidates[-1].memory_gb  # the largest by slices, as HAMi takes it
    memory = request.memreq
    if memory > 0 and largest > 0 and memory > largest * 2:
        memory = math.ceil(memory / 1024)  # a MiB figure
    return next(
        (
            p
            for p in candidates
            if (memory <= 0 or p.memory_gb >= memory)
            and (request.coresreq <= 0 or p.cores >= request.coresreq)
        ),
        None,
    )


def _read(value: Any, what: str) -> int:
    """HAMi's parseDRSCapacity: a JSON number (truncated) or a numeric string."""
    if isinstance(value, bool) or value is None:
        raise CodecError(f"{CAPACITY}: {what} capacity {value!r} is not a number")
    if isinstance(value, int | float):
        if math.isnan(value) or not -(2**31) <= value <= INT32_MAX:
            raise CodecError(f"{CAPACITY}: {what} capacity {value!r} is out of range")
        return int(value)
    n = atoi(str(value).strip()) if isinstance(value, str) else None
    if n is None:
        raise CodecError(f"{CAPACITY}: {what} capacity {value!r} is not a number")
    return max(min(n, INT32_MAX), -(2**31))


def _text(entry: Mapping[str, Any], key: str) -> str:
    value = entry.get(key)
    if value is not None and not isinstance(value, str):
        raise CodecError(f"{CAPACITY}: {key} must be a string, got {value!r}")
    return value or ""


def decode_drs(value: str, node: str) -> tuple[DeviceInfo, ...]:
    """HAMi's GetNodeDevices for DRS shares: one card per device of the capacity list, its
    memory the largest profile's, its count the slices it holds."""
    try:
        spec = go_keys(orjson.loads(value), CAPACITY)
    except orjson.JSONDecodeError as e:
        raise CodecError(f"{CAPACITY} is not valid JSON: {e}") from e
    named = spec.get("profiles") or {}
    if not isinstance(named, dict) or not all(isinstance(v, str) for v in named.values()):
        raise CodecError(f"{CAPACITY}: profiles must map names to ids")
    shapes = [profile_shape(n) for n in named]
    slices = max((s for s, _ in shapes), default=0)
    if slices <= 0:
        raise CodecError(f"{CAPACITY}: no valid DRS profile on node {node}")
    memory = max((m for _, m in shapes), default=0) or slices
    listed = spec.get("devices") or []
    if not isinstance(listed, list) or not listed:
        raise CodecError(f"{CAPACITY}: no DRS devices on node {node}")
    cards = []
    for position, raw in enumerate(listed):
        entry = go_keys(raw, CAPACITY)
        index = atoi(_text(entry, "index"))
        index = position if index is None else index
        count = _read(entry.get("capacity"), str(index))
        if count <= 0:
            raise CodecError(f"{CAPACITY}: device {index} has no capacity")
        minor = _text(entry, "minor").strip() or str(index)
        custom = {
            "index": str(index),
            "maxSlice": str(slices),
            "minor": minor,
            "profiles": orjson.dumps(named, option=orjson.OPT_SORT_KEYS).decode(),
        }
        cards.append(
            DeviceInfo(
                f"{node}-enflame-drs-{index}",
                index,
                count,
                memory * 1024,
                100,
                DRS,
                custom=tuple(sorted(custom.items())),
            )
        )
    return tuple(cards)
