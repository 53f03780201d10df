"""NVIDIA's webhook rule for one container (HAMi's NVIDIA MutateAdmission), as a Claim.

hami.engine.admission applies it to every container of a pod it takes; the NVIDIA family
answers it as its Family.claim.
"""

from collections.abc import Mapping
from typing import Any

from hami.engine.families.base import Claim
from hami.engine.quantity import QuantityError, as_int64
from hami.engine.requests import ResourceDefaults


def _has(resources: Mapping[str, Any], name: str) -> bool:
    return any(name in (resources.get(s) or {}) for s in ("limits", "requests"))


def nvidia_claim(
    container: Mapping[str, Any], defaults: ResourceDefaults, gpu_core_policy: str = "default"
) -> Claim:
    """Whether the container asks for an NVIDIA card (a count, or memory or cores that the
    default count completes), the limits HAMi sets (that count; 100 cores on a card whose
    memory it takes whole) and the variables it adds (the task priority, the core policy)."""
    r = defaults.names
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    pct = limits.get(
        r.memory_percentage, (resources.get("requests") or {}).get(r.memory_percentage)
    )
    pct_value: int | None = None
    if pct is not None:
        try:
            pct_value = as_int64(pct)
        except QuantityError:
            pct_value = None
        if pct_value is None or not 0 <= pct_value <= 100:
            return Claim(
                False,
                error=f"invalid {r.memory_percentage} value {pct} in container "
                f"{container.get('name', '?')}: must be an integer between 0 and 100",
            )
    env: list[tuple[str, str]] = []
    if r.priority in limits:
        env.append(("CUDA_TASK_PRIORITY", str(limits[r.priority])))
    if gpu_core_policy not in ("", "default"):
        env.append(("GPU_CORE_UTILIZATION_POLICY", gpu_core_policy))
    set_limits: list[tuple[str, Any]] = []
    # A count under requests counts too: the cores default below writes limits, and a second
    # pass must not then take the container for one without a count.
    has_gpu = _has(resources, r.gpu)
    if (
        not has_gpu
        and defaults.default_gpu_num > 0
        and any(k in limits for k in (r.cores, r.memory, r.memory_percentage))
    ):
        set_limits.append((r.gpu, defaults.default_gpu_num))
        has_gpu = True
    # A container that takes a card's whole memory cannot share its cores either.
    if (
        has_gpu
        and not _has(resources, r.cores)
        and (pct_value == 100 or (pct is None and not _has(resources, r.memory)))
    ):
        set_limits.append((r.cores, "100"))
    return Claim(has_gpu, limits=tuple(set_limits), env=tuple(env))
