"""The sGPU device plugin's wire: the cards it registers on the node and the allocation
it reads back from the pod (HAMi's protocol.go)."""

import json
from typing import Any

import orjson

from hami.engine.codec import INT32_MAX, CodecError, go_int, go_keys, go_string
from hami.engine.families.metax.config import SGPU_TYPE
from hami.engine.model import DeviceInfo, PodDevices

INT32_MIN = -(2**31)


# The card facts only MetaX registers, kept in DeviceInfo.custom under HAMi's CustomInfo keys.
LINK_ZONE = "LinkZone"  # MetaLink group; 0 for none
MODEL = "Model"
QOS = "QosPolicy"  # the QoS policy the card runs under now


def custom(qos: str = "", zone: int = 0, model: str = "") -> tuple[tuple[str, str], ...]:
    """A card's MetaX facts as DeviceInfo.custom holds them (sorted by key)."""
    return ((LINK_ZONE, str(zone)), (MODEL, model), (QOS, qos))


def _card(index: int, entry: dict[str, Any], uuid: str) -> DeviceInfo:
    def number(key: str) -> int:
        return go_int(entry, key, uuid, INT32_MIN, INT32_MAX)

    healthy = entry.get("healthy")
    if healthy is not None and not isinstance(healthy, bool):
        raise CodecError(f"{uuid}: healthy must be true or false, got {healthy!r}")
    return DeviceInfo(
        id=uuid,
        index=index,
        count=number("totaldevcount"),
        devmem=number("totalvram"),
        devcore=number("totalcompute"),
        type=SGPU_TYPE,
        numa=number("numa"),
        mode="",
        health=healthy is True,
        custom=custom(
            go_string(entry, "qospolicy", uuid),
            number("linkzone"),
            go_string(entry, "model", uuid),
        ),
    )


def qos_of(info: DeviceInfo) -> str:
    return info.custom_value(QOS) or ""


def zone_of(info: DeviceInfo) -> int:
    value = info.custom_value(LINK_ZONE) or "0"
    return int(value) if value.lstrip("-").isdigit() else 0


def decode(value: str) -> tuple[DeviceInfo, ...] | None:
    """`metax-tech.com/node-gpu-devices`: a JSON array of cards (Go's field names, matched
    without regard to case). None for an empty list (HAMi: no sGPU on the node); CodecError
    for what Go's decoder refuses."""
    try:
        entries: Any = orjson.loads(value)
    except orjson.JSONDecodeError as e:
        raise CodecError(f"sGPU device list is not valid JSON: {e}") from e
    if entries is None:
        return None
    if not isinstance(entries, list):
        raise CodecError("sGPU device list must be a JSON array")
    cards = []
    for index, raw in enumerate(entries):
        if raw is None:
            # HAMi dereferences it and panics; we refuse the registration instead.
            raise CodecError(f"sGPU device {index} is null")
        entry = go_keys(raw, f"sGPU device {index}")
        uuid = go_string(entry, "uuid", f"sGPU device {index}")
        cards.append(_card(index, entry, uuid))
    return tuple(cards) or None


def plugin_allocation(devices: PodDevices) -> str:
    """`metax-tech.com/gpu-devices-allocated`: per container, each card's uuid, compute and
    vRam (MiB), zero values omitted, as Go's json.Marshal writes them."""
    return _go_json(
        [
            [
                {
                    "uuid": d.uuid,
                    **({"compute": d.usedcores} if d.usedcores else {}),
                    **({"vRam": d.usedmem} if d.usedmem else {}),
                }
                for d in container
            ]
            for container in devices
        ]
    )


def _go_json(value: Any) -> str:
    """Compact JSON with Go's HTML-safe escapes (json.Marshal escapes <, > and &)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for char, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escaped)
    return text
