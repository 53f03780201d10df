"""HAMi's device plugin in MIG mode, as the node simulator plays it: no GPUs, same checks.

When kubelet calls Allocate for a container holding cards in MIG mode, HAMi v2.10's plugin
(pkg/device-plugin/nvidiadevice/nvinternal/plugin: server.go, util.go) decodes
``hami.io/vgpu-mig-allocations`` (its DecodeMigAllocations checks), takes the entries of that
container (containerIndex counts init containers first, as kubelet names them), requires one
per card in deviceIndex order, creates each instance at exactly its profile and placement
(NVML refuses a placement that overlaps an instance already on the card), and writes the
instance's identity back into the annotation. This module does the same against the pods on
the node instead of NVML, so an allocation that is missing, malformed or overlapping is
refused as the real plugin refuses it. One difference, on the strict side: the real plugin
hands a second pod planned at exactly the placement of a running pod's instance that same
instance (its instances are keyed by card, profile and placement), so two pods would share
it; here that is refused like any overlap, since the scheduler must never plan it. Within
one pod, an app container planned where an init container's instance is reuses it, as the
real plugin does. It reads the annotation with its own code, not the scheduler's. Runtime
identities are made up: ``MIG-<uuid5>``, the GPU instance id is the placement's start, the
compute instance id 0.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from .nodespec import CardSpec, go_json

MIG_ALLOCATIONS = "hami.io/vgpu-mig-allocations"
RUNTIME = ("migUUID", "gpuInstanceID", "computeInstanceID")

Obj = dict[str, Any]


class MigRefusedError(Exception):
    """What the device plugin returns to kubelet; the pod fails with UnexpectedAdmissionError."""


def decode(raw: str) -> list[Obj]:
    """DecodeMigAllocations: every entry complete, runtime identity all or nothing, no two
    entries for one container and card position."""
    if not raw:
        return []
    try:
        entries = json.loads(raw)
    except json.JSONDecodeError as err:
        raise MigRefusedError(f"decode scheduler MIG allocations: {err}") from None
    seen = set()
    for i, e in enumerate(entries or []):
        placement = e.get("placement") or {}
        if (
            e.get("containerIndex", 0) < 0
            or e.get("deviceIndex", 0) < 0
            or not e.get("gpuUUID")
            or not e.get("profile")
            or not placement.get("size")
        ):
            raise MigRefusedError(
                f"decode scheduler MIG allocations: MIG allocation {i} is incomplete"
            )
        runtime = sum(e.get(k) is not None and e.get(k) != "" for k in RUNTIME)
        if runtime not in (0, 3):
            raise MigRefusedError(f"MIG allocation {i} has partial runtime identity")
        key = (e.get("containerIndex", 0), e.get("deviceIndex", 0))
        if key in seen:
            raise MigRefusedError(
                f"duplicate MIG allocation for container {key[0]} device {key[1]}"
            )
        seen.add(key)
    return list(entries or [])


def encode(entries: Iterable[Obj]) -> str:
    """As the plugin marshals its MigAllocation struct (field order, omitempty identity)."""
    out = []
    for e in entries:
        item = {
            "containerIndex": e.get("containerIndex", 0),
            "deviceIndex": e.get("deviceIndex", 0),
            "gpuUUID": e["gpuUUID"],
            "profile": e["profile"],
            "placement": {"start": e["placement"].get("start", 0), "size": e["placement"]["size"]},
        }
        item.update({k: e[k] for k in RUNTIME if e.get(k) is not None and e.get(k) != ""})
        out.append(item)
    return go_json(out)


def _span(e: Obj) -> tuple[int, int]:
    start = int(e["placement"].get("start", 0))
    return start, start + int(e["placement"]["size"])


def _overlaps(a: Obj, b: Obj) -> bool:
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


def _label(e: Obj) -> str:
    first, end = _span(e)
    return f"{e['profile']}@{first}-{end - 1}"


def realize(
    pod: Obj,
    container: str,
    index: int,
    devices: Sequence[str],
    cards: dict[str, CardSpec],
    others: Sequence[Obj],
) -> str | None:
    """Create the instances of container ``container`` (``index`` in init-then-app order)
    holding ``devices``; the annotation with their identities, or None when none of its cards
    is in MIG mode. ``others`` are the other live pods on the node."""
    if not any(cards[d].mode == "mig" for d in devices):
        return None
    entries = decode(pod["metadata"].get("annotations", {}).get(MIG_ALLOCATIONS, ""))
    mine = sorted(
        (e for e in entries if e.get("containerIndex", 0) == index),
        key=lambda e: e.get("deviceIndex", 0),
    )
    if len(mine) != len(devices):
        raise MigRefusedError(
            f"container {container} has {len(mine)} MIG reservations, requested {len(devices)} devices"
        )
    existing = [
        (e, _key(other))
        for other in others
        for e in decode(other["metadata"].get("annotations", {}).get(MIG_ALLOCATIONS, ""))
        if e.get("migUUID")
    ]
    existing += [(e, "this pod") for e in entries if e.get("migUUID")]
    for entry, card in zip(mine, devices, strict=True):
        if entry["gpuUUID"] != card:
            raise MigRefusedError(
                f"MIG reservation GPU {entry['gpuUUID']} does not match allocated GPU {card}"
            )
        _check_offered(entry, cards[card])
        same = next(
            (
                e
                for e, owner in existing
                if owner == "this pod"
                and e["gpuUUID"] == card
                and e["profile"] == entry["profile"]
                and _span(e) == _span(entry)
            ),
            None,
        )
        if same is not None:  # an init container's instance, reused as HAMi's plugin does
            entry.update({k: same[k] for k in RUNTIME})
            continue
        for e, owner in existing:
            if e["gpuUUID"] == card and _overlaps(e, entry):
                raise MigRefusedError(
                    f"create MIG instance {_label(entry)} on {card}: it overlaps instance "
                    f"{e['migUUID']} ({_label(e)}) of {owner}"
                )
        start, _ = _span(entry)
        name = f"{card}/{entry['profile']}/{start}"
        entry.update(
            migUUID=f"MIG-{uuid.uuid5(uuid.NAMESPACE_URL, name)}",
            gpuInstanceID=start,
            computeInstanceID=0,
        )
        existing.append((entry, "this pod"))
    return encode(entries)


def _check_offered(entry: Obj, card: CardSpec) -> None:
    """NVML creates only the placements the card reports for the profile."""
    for profile in card.mig_profiles:
        if profile["name"] == entry["profile"]:
            start, end = _span(entry)
            if {"start": start, "size": end - start} in profile["placements"]:
                return
    raise MigRefusedError(f"{card.uuid} offers no MIG instance {_label(entry)}")


def _key(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
