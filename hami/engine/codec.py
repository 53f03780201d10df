"""HAMi's annotation formats, byte for byte, both ways.

Allocation strings: `<uuid>,NVIDIA,<MiB>,<cores>:` per card, `;` after every
container, init containers first (`GPU-a,NVIDIA,1000,0:;`).
Node registration: a JSON array since HAMi v2.8 (zero and false fields
omitted), the colon-separated legacy form before it.
"""

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

from hami.engine.model import ContainerDevice, ContainerDevices, DeviceInfo, PodDevices


class CodecError(ValueError):
    """An annotation value that does not follow HAMi's format."""


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
            out.append(ContainerDevice(fields[0], int(fields[2]), int(fields[3]), fields[1]))
        except ValueError as e:
            raise CodecError(f"device entry {piece!r}: memory and cores must be integers") from e
    return tuple(out)


def decode_pod_devices(value: str) -> PodDevices:
    """Inverse of encode_pod_devices; `;` terminates each container, so the last piece is dropped."""
    segments = value.split(";")
    if segments and segments[-1] == "":
        segments.pop()
    return tuple(_decode_container(s) for s in segments)


def _int_field(entry: Mapping[str, Any], key: str) -> int:
    v = entry.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, int):
        raise CodecError(f"field {key!r} must be an integer, got {v!r}")
    return v


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
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise CodecError(f"device entry without an id: {entry!r}")
        out.append(
            DeviceInfo(
                id=entry["id"],
                index=_int_field(entry, "index"),
                count=_int_field(entry, "count"),
                devmem=_int_field(entry, "devmem"),
                devcore=_int_field(entry, "devcore"),
                type=str(entry.get("type", "")),
                numa=max(_int_field(entry, "numa"), 0),
                mode=str(entry.get("mode", "")) or "hami-core",
                health=entry.get("health") is True,
            )
        )
    return tuple(out)


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


def encode_node_lock(now: datetime, namespace: str, name: str) -> str:
    return f"{now.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')},{namespace},{name}"


def decode_node_lock(value: str) -> tuple[datetime, str | None, str | None]:
    """(time, namespace, name); legacy locks hold a bare RFC 3339 time and no owner."""
    parts = value.split(",")
    try:
        when = datetime.fromisoformat(parts[0].replace("Z", "+00:00"))
    except ValueError as e:
        raise CodecError(f"node lock {value!r} does not start with an RFC 3339 time") from e
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    if len(parts) >= 3:
        return when, parts[1], ",".join(parts[2:])
    return when, None, None
