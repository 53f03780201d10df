"""KAI Scheduler's GPU-sharing requests, translated into ours at admission.

A Lab 12 manifest asks with annotations (`gpu-memory: "4096"` in MiB, or
`gpu-fraction: "0.5"`) instead of resources; translating them lets such a pod
move over unchanged, and the exact MiB it asked for becomes its limit (KAI's
two-decimal rounding turned 4096 into 4147).
"""

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from hami.engine.requests import RequestError, ResourceNames

GPU_MEMORY = "gpu-memory"
GPU_FRACTION = "gpu-fraction"
NUM_DEVICES = "gpu-fraction-num-devices"
CONTAINER_NAME = "gpu-fraction-container-name"
KEYS = (GPU_MEMORY, GPU_FRACTION, NUM_DEVICES, CONTAINER_NAME)


def wants_kai_sharing(annotations: Mapping[str, str]) -> bool:
    return GPU_MEMORY in annotations or GPU_FRACTION in annotations


def _target(spec: dict[str, Any], name: str | None) -> dict[str, Any]:
    # KAI searches init containers first, and defaults to the first app container.
    if name is None:
        first: dict[str, Any] = spec["containers"][0]
        return first
    for c in [*(spec.get("initContainers") or ()), *spec["containers"]]:
        if c.get("name") == name:
            found: dict[str, Any] = c
            return found
    raise RequestError(f"{CONTAINER_NAME}: the pod has no container named {name!r}")


def translate(pod: dict[str, Any], names: ResourceNames) -> None:
    """Rewrite KAI's annotations into our resources on the target container (in place)."""
    annotations = pod["metadata"].get("annotations") or {}
    if not wants_kai_sharing(annotations):
        return
    memory, fraction = annotations.get(GPU_MEMORY), annotations.get(GPU_FRACTION)
    if memory is not None and fraction is not None:
        raise RequestError(f"set either {GPU_MEMORY} or {GPU_FRACTION}, not both")
    try:
        devices = int(annotations.get(NUM_DEVICES, "1"))
    except ValueError:
        raise RequestError(f"{NUM_DEVICES} must be a whole number") from None
    if devices < 1:
        raise RequestError(f"{NUM_DEVICES} must be at least 1")
    container = _target(pod["spec"], annotations.get(CONTAINER_NAME))
    limits = container.setdefault("resources", {}).setdefault("limits", {})
    requests = container["resources"].get("requests") or {}
    if names.gpu in limits or names.gpu in requests:
        raise RequestError(
            f"container {container.get('name')} asks for {names.gpu} and a KAI GPU share; keep one of them"
        )
    limits[names.gpu] = devices
    if memory is not None:
        if not memory.isdigit() or int(memory) <= 0:
            raise RequestError(
                f"{GPU_MEMORY} must be a positive whole number of MiB, got {memory!r}"
            )
        limits[names.memory] = int(memory)
    else:
        try:
            share = Decimal(str(fraction))
        except InvalidOperation:
            raise RequestError(
                f"{GPU_FRACTION} must be a number between 0 and 1, got {fraction!r}"
            ) from None
        if not 0 < share < 1:
            raise RequestError(
                f"{GPU_FRACTION} must be between 0 and 1 (exclusive), got {fraction!r}"
            )
        percent = int(share * 100)
        if percent < 1:
            raise RequestError(f"{GPU_FRACTION} {fraction!r} is below 1% of a card")
        limits[names.memory_percentage] = percent
    for key in KEYS:
        annotations.pop(key, None)
