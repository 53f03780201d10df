"""`hami.io/vgpu-mig-allocations`, HAMi v2.10's record of a pod's MIG instances, both ways.

A pod the scheduler placed on a card in `mig` mode carries it beside its usual
allocation: a JSON array with one entry per MIG instance (containerIndex and
deviceIndex into the allocation string, the card, the profile and placement),
to which HAMi's device plugin adds the instance it created (migUUID,
gpuInstanceID, computeInstanceID).
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from hami.engine.codec import (
    UINT32_MAX,
    CodecError,
    go_int,
    go_keys,
    go_list,
    go_placement,
    go_string,
)
from hami.engine.mig import label
from hami.engine.model import MigInstance, PodDevices


@dataclass(frozen=True, slots=True)
class MigAllocation:
    """One entry of `hami.io/vgpu-mig-allocations`."""

    container: int  # containerIndex: init containers first, as in the allocation string
    device: int  # deviceIndex within that container's cards
    gpu: str  # gpuUUID, the card
    instance: MigInstance


def allocations(devices: PodDevices) -> tuple[MigAllocation, ...]:
    """The MIG entries of an allocation, in container and card order."""
    return tuple(
        MigAllocation(c, i, d.uuid, d.mig)
        for c, container in enumerate(devices)
        for i, d in enumerate(container)
        if d.mig is not None
    )


def by_card(entries: Iterable[MigAllocation]) -> dict[str, tuple[MigInstance, ...]]:
    out: dict[str, tuple[MigInstance, ...]] = {}
    for e in entries:
        out[e.gpu] = (*out.get(e.gpu, ()), e.instance)
    return out


# Go's encoding/json escapes these inside strings; written the same, the value is byte-equal.
_GO_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def encode_allocations(entries: Iterable[MigAllocation]) -> str:
    """The annotation's value, as HAMi's scheduler (and, with the runtime identity, its
    device plugin) marshals it; "" for none."""
    out = []
    for e in entries:
        item: dict[str, Any] = {
            "containerIndex": e.container,
            "deviceIndex": e.device,
            "gpuUUID": e.gpu,
            "profile": e.instance.profile,
            "placement": {"start": e.instance.placement.start, "size": e.instance.placement.size},
        }
        if e.instance.uuid:
            item["migUUID"] = e.instance.uuid
        if e.instance.gpu_instance is not None:
            item["gpuInstanceID"] = e.instance.gpu_instance
        if e.instance.compute_instance is not None:
            item["computeInstanceID"] = e.instance.compute_instance
        out.append(item)
    return orjson.dumps(out).decode().translate(_GO_ESCAPES) if out else ""


def decode_allocations(value: str) -> tuple[MigAllocation, ...]:
    """HAMi's DecodeMigAllocations, with its checks: every entry complete, the runtime
    identity all there or not at all, one entry per container and card position."""
    if value == "":
        return ()
    try:
        raw = orjson.loads(value)
    except orjson.JSONDecodeError as e:
        raise CodecError(f"MIG allocations are not valid JSON: {e}") from e
    out: list[MigAllocation] = []
    seen: set[tuple[int, int]] = set()
    for i, item in enumerate(go_list(raw, "MIG allocations")):
        alloc = _allocation(go_keys(item, f"MIG allocation {i}"), f"MIG allocation {i}")
        key = (alloc.container, alloc.device)
        if key in seen:
            raise CodecError(f"duplicate MIG allocation for container {key[0]} device {key[1]}")
        seen.add(key)
        out.append(alloc)
    return tuple(out)


def _allocation(entry: dict[str, Any], what: str) -> MigAllocation:
    where = go_placement(entry.get("placement") or {}, f"{what} placement")
    # The runtime identity is there once the device plugin has created the instance.
    uuid = go_string(entry, "miguuid", what)
    gi = entry.get("gpuinstanceid")
    ci = entry.get("computeinstanceid")
    alloc = MigAllocation(
        container=go_int(entry, "containerindex", what, -(2**63), 2**63 - 1),
        device=go_int(entry, "deviceindex", what, -(2**63), 2**63 - 1),
        gpu=go_string(entry, "gpuuuid", what),
        instance=MigInstance(
            go_string(entry, "profile", what),
            where,
            uuid,
            None if gi is None else go_int(entry, "gpuinstanceid", what, 0, UINT32_MAX),
            None if ci is None else go_int(entry, "computeinstanceid", what, 0, UINT32_MAX),
        ),
    )
    complete = alloc.container >= 0 and alloc.device >= 0 and alloc.gpu
    if not complete or not alloc.instance.profile or where.size == 0:
        raise CodecError(f"{what} is incomplete")
    if sum((bool(uuid), gi is not None, ci is not None)) not in (0, 3):
        raise CodecError(f"{what} has partial runtime identity")
    return alloc


def summary(value: str | None) -> str | None:
    """The annotation in a line (`3g.20gb@4-7,1g.5gb@3`), as the lab-card table shows it; the
    value as written when it cannot be read, None when there is none."""
    if not value:
        return None
    try:
        return ",".join(label(a.instance) for a in decode_allocations(value))
    except CodecError:
        return value
