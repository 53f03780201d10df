"""HAMi's annotation formats, byte for byte, both ways.

Allocation strings: `<uuid>,NVIDIA,<MiB>,<cores>:` per card, `;` after every
container, init containers first (`GPU-a,NVIDIA,1000,0:;`).
Node registration: a JSON array since HAMi v2.8 (zero and false fields
omitted), the colon-separated legacy form before it. A card in `mig` mode
lists the MIG profiles it offers (`migProfiles`, HAMi v2.10); one registered
by an older device plugin (`migtemplate`, or the legacy form) lists none, and
no profile fits it, as under HAMi v2.10.
"""

import functools
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from hami.engine.model import (
    ContainerDevice,
    ContainerDevices,
    DeviceInfo,
    MigPlacement,
    MigProfile,
    PodDevices,
)


class CodecError(ValueError):
    """An annotation value that does not follow HAMi's format."""


# HAMi reads its JSON with Go's encoding/json, which matches keys without regard to case
# (`memorymb` reads as `memoryMB`) and takes null as absent; so do the readers below.
UINT32_MAX = 2**32 - 1
INT32_MAX = 2**31 - 1


def go_keys(entry: Any, what: str) -> dict[str, Any]:
    """A JSON object as Go decodes it into a struct: keys folded to lower case (the later of
    two spellings wins), and a null never replaces a value."""
    if not isinstance(entry, dict):
        raise CodecError(f"{what} must be a JSON object, got {entry!r}")
    out: dict[str, Any] = {}
    for k, v in entry.items():
        if v is None:
            out.setdefault(k.lower(), None)
        else:
            out[k.lower()] = v
    return out


def go_int(entry: Mapping[str, Any], key: str, what: str, low: int, high: int) -> int:
    v = entry.get(key)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise CodecError(f"{what}: {key} must be an integer from {low} to {high}, got {v!r}")
    return v


def go_string(entry: Mapping[str, Any], key: str, what: str) -> str:
    v = entry.get(key)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise CodecError(f"{what}: {key} must be a string, got {v!r}")
    return v


def go_list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise CodecError(f"{what} must be a JSON array")
    return value


def go_placement(raw: Any, what: str) -> MigPlacement:
    entry = go_keys(raw, what)
    return MigPlacement(
        go_int(entry, "start", what, 0, UINT32_MAX), go_int(entry, "size", what, 0, UINT32_MAX)
    )


def decode_profiles(raw: Any, card: str) -> tuple[MigProfile, ...]:
    """A card's `migProfiles`. A placement of no slices is refused: it would overlap nothing,
    so one card could hand out instances without end (NVML never reports one)."""
    out = []
    for i, item in enumerate(go_list(raw, f"{card}: migProfiles")):
        what = f"{card}: MIG profile {i}"
        entry = go_keys(item, what)
        name = go_string(entry, "name", what)
        placements = tuple(
            go_placement(p, f"{what} ({name}) placement {j}")
            for j, p in enumerate(go_list(entry.get("placements"), f"{what} placements"))
        )
        if any(p.size == 0 for p in placements):
            raise CodecError(f"{what} ({name}): a placement must span at least one slice")
        out.append(
            MigProfile(
                name=name,
                memory=go_int(entry, "memorymb", what, -(2**31), INT32_MAX),
                core=go_int(entry, "core", what, -(2**31), INT32_MAX),
                slices=go_int(entry, "slicecount", what, 0, UINT32_MAX),
                placements=placements,
            )
        )
    return tuple(out)


def encode_profiles(profiles: Iterable[MigProfile]) -> list[dict[str, Any]]:
    """As HAMi's device plugin writes them (no field is omitted when zero)."""
    return [
        {
            "name": p.name,
            "memoryMB": p.memory,
            "core": p.core,
            "sliceCount": p.slices,
            "placements": [{"start": x.start, "size": x.size} for x in p.placements],
        }
        for p in profiles
    ]


def encode_pod_devices(devices: PodDevices) -> str:
    return "".join(
        "".join(f"{d.uuid},{d.type},{d.usedmem},{d.usedcores}:" for d in container) + ";"
        for container in devices
    )


def _decode_container(segment: str) -> ContainerDevices:
    out = []
    for piece in segment.split(":"):
        if "," not in piece:
            continue  # the empty tail after the last ':'
        fields = piece.split(",")
        if len(fields) < 4:
            continue
        try:
            # Interned: every pod on a card names it, and the cache keeps what each pod holds.
            uuid, kind = sys.intern(fields[0]), sys.intern(fields[1])
            out.append(ContainerDevice(uuid, int(fields[2]), int(fields[3]), kind))
        except ValueError as e:
            raise CodecError(f"device entry {piece!r}: memory and cores must be integers") from e
    return tuple(out)


# A pod's allocation is decoded again with each of its watch events (and bound pods on a card
# often carry the same text): each distinct text is decoded once. The result is immutable, and
# a text that does not decode raises every time (lru_cache keeps no exceptions).
@functools.lru_cache(maxsize=4096)
def decode_pod_devices(value: str) -> PodDevices:
    """Inverse of encode_pod_devices; `;` terminates each container, so the last piece is dropped."""
    segments = value.split(";")
    if segments and segments[-1] == "":
        segments.pop()
    return tuple(_decode_container(s) for s in segments)


def decode_node_devices(value: str) -> tuple[DeviceInfo, ...]:
    """Parse `hami.io/node-nvidia-register` in either format."""
    text = value.strip()
    if text.startswith("["):
        return _decode_node_json(text)
    return _decode_node_legacy(text)


def _decode_node_json(text: str) -> tuple[DeviceInfo, ...]:
    try:
        entries = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise CodecError(f"node device list is not valid JSON: {e}") from e
    if not isinstance(entries, list):
        raise CodecError("node device list must be a JSON array")
    out = []
    for raw in entries:
        entry = go_keys(raw, "device entry")
        card = entry.get("id")
        if not isinstance(card, str):
            raise CodecError(f"device entry without an id: {raw!r}")
        out.append(
            DeviceInfo(
                id=card,
                index=go_int(entry, "index", card, 0, 2**64 - 1),
                count=go_int(entry, "count", card, -(2**31), INT32_MAX),
                devmem=go_int(entry, "devmem", card, -(2**31), INT32_MAX),
                devcore=go_int(entry, "devcore", card, -(2**31), INT32_MAX),
                type=str(entry.get("type") or ""),
                numa=max(go_int(entry, "numa", card, -(2**63), 2**63 - 1), 0),
                mode=str(entry.get("mode") or "") or "hami-core",
                health=entry.get("health") is True,
                mig_profiles=decode_profiles(entry.get("migprofiles"), card),
                custom=decode_custom(entry.get("custominfo"), card),
            )
        )
    return tuple(out)


def decode_custom(raw: Any, card: str) -> tuple[tuple[str, str], ...]:
    """A card's `custominfo` object. Go reads it into map[string]any and each family
    asserts the values it wants to be strings, so other values count as absent; its keys
    are matched exactly (a map, not a struct)."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise CodecError(f"{card}: custominfo must be a JSON object, got {raw!r}")
    return tuple(sorted((k, v) for k, v in raw.items() if isinstance(v, str)))


def _decode_node_legacy(text: str) -> tuple[DeviceInfo, ...]:
    out = []
    for piece in text.split(":"):
        if not piece.strip():
            continue
        f = piece.split(",")
        if len(f) < 7:
            raise CodecError(f"legacy device entry {piece!r} has fewer than 7 fields")
        try:
            out.append(
                DeviceInfo(
                    id=f[0],
                    count=int(f[1]),
                    devmem=int(f[2]),
                    devcore=int(f[3]),
                    type=f[4],
                    numa=max(int(f[5]), 0),
                    health=f[6].strip().lower() == "true",
                    index=int(f[7]) if len(f) > 7 else 0,
                    mode=f[8] if len(f) > 8 and f[8] else "hami-core",
                )
            )
        except ValueError as e:
            raise CodecError(f"legacy device entry {piece!r}: {e}") from e
    return tuple(out)


def encode_node_devices(devices: tuple[DeviceInfo, ...]) -> str:
    """The JSON HAMi's v2.8+ device plugin writes, Go `omitempty` rules included."""
    out = []
    for d in devices:
        entry: dict[str, Any] = {"id": d.id}
        for key, v in (
            ("index", d.index),
            ("count", d.count),
            ("devmem", d.devmem),
            ("devcore", d.devcore),
            ("type", d.type),
            ("numa", d.numa),
            ("mode", d.mode),
            ("migProfiles", encode_profiles(d.mig_profiles)),
            ("health", d.health),
        ):
            if v:
                entry[key] = v
        out.append(entry)
    return orjson.dumps(out).decode()


def decode_link_scores(value: str) -> dict[str, dict[str, int]]:
    """`hami.io/node-nvidia-score`: [{"uuid": a, "score": {b: n}}] -> {a: {b: n}}."""
    try:
        entries = orjson.loads(value)
    except orjson.JSONDecodeError as e:
        raise CodecError(f"link scores are not valid JSON: {e}") from e
    if not isinstance(entries, list):
        raise CodecError("link scores must be a JSON array")
    out: dict[str, dict[str, int]] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("uuid"), str):
            raise CodecError(f"link score entry without a uuid: {entry!r}")
        scores = entry.get("score") or {}
        if not isinstance(scores, dict):
            raise CodecError(f"link scores of {entry['uuid']} must be an object")
        out[entry["uuid"]] = {str(k): int(v) for k, v in scores.items()}
    return out


def split_list(value: str | None) -> tuple[str, ...]:
    """A comma list as HAMi reads selector annotations: trimmed, empties dropped."""
    if not value:
        return ()
    return tuple(p.strip() for p in value.split(",") if p.strip())
