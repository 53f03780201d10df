"""What a pod asks for: HAMi's GenerateResourceRequests for NVIDIA, per container.

Each resource is read from limits first, then requests. Parsing is lenient
(HAMi ignores a container with a malformed value) unless `strict` is set, as
the webhook does, so users get an error naming the value instead of a pod
that silently schedules without a GPU. Requests beyond the caps below are
refused in both modes: the work of placing a pod grows with them.
"""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hami.engine import nvidianames as nv
from hami.engine.model import PERCENTAGE_UNSET, ContainerRequest, PodRequest
from hami.engine.quantity import QuantityError, as_int64, parse_quantity
from hami.engine.shared import shared

INT32_MAX = 2**31 - 1
# Cards one container may ask for. No node carries more than a few dozen; the limit keeps the
# per-card work of admission (one limit variable per card) and placement bounded whatever the
# number written.
MAX_GPUS_PER_CONTAINER = 64
# Containers (init and app together) of a GPU pod: placement fits each one on every candidate
# node, so their number multiplies the cluster's size.
MAX_CONTAINERS = 64


@dataclass(frozen=True, slots=True)
class ResourceNames:
    gpu: str = nv.GPU
    memory: str = nv.GPUMEM
    memory_percentage: str = nv.GPUMEM_PERCENTAGE
    cores: str = nv.GPUCORES
    priority: str = nv.PRIORITY

    def all(self) -> tuple[str, ...]:
        return (self.gpu, self.memory, self.memory_percentage, self.cores, self.priority)


@dataclass(frozen=True, slots=True)
class ResourceDefaults:
    """HAMi's device config (`device-config.yaml`, `nvidia:` section)."""

    names: ResourceNames = ResourceNames()
    default_memory: int = 0  # MiB; 0 means the whole card
    default_cores: int = 0
    default_gpu_num: int = 1
    memory_factor: int = 1


class RequestError(ValueError):
    """A GPU resource value the scheduler cannot honour; the message names the container."""


class LimitError(RequestError):
    """A request beyond one of the caps; refused even by lenient parsing."""


def _lookup(resources: Mapping[str, Any], name: str) -> Any:
    for section in ("limits", "requests"):
        values = resources.get(section) or {}
        if name in values:
            return values[name]
    return None


def _int(value: Any, resource: str, container: str) -> int:
    try:
        n = as_int64(value)
    except QuantityError as e:
        raise RequestError(f"container {container}: {resource}: {e}") from e
    if n is None:
        raise RequestError(
            f"container {container}: {resource} must be a whole number, got {value!r}"
        )
    return n


# Suffixes that make a gpumem quantity a number of bytes. Not `k`: kube-apiserver stores a
# plain 3000 as `3k`, and HAMi's gpumem is MiB, so `3k` must stay 3000 MiB.
_BYTE_SUFFIX = re.compile(r"[0-9.](?:[KMGTPE]i|[MGTPE])\s*$")
MIB = 2**20


def _memory(value: Any, resource: str, container: str, factor: int) -> int:
    """MiB from a gpumem quantity: a plain number is MiB (times the memory factor), as in HAMi;
    one with a byte suffix (`1Gi`, `1000Mi`, `2G`) is the bytes it says, in whole MiB."""
    if not (isinstance(value, str) and _BYTE_SUFFIX.search(value)):
        return _int(value, resource, container) * factor
    try:
        mib = parse_quantity(value) / MIB
    except QuantityError as e:
        raise RequestError(f"container {container}: {resource}: {e}") from e
    if mib.denominator != 1:
        raise RequestError(
            f"container {container}: {resource} {value!r} is {float(mib):.2f} MiB, not a whole "
            f"number of MiB: write the MiB without a suffix (e.g. {int(mib)}), or use Mi or Gi"
        )
    return int(mib)


def container_request(
    container: Mapping[str, Any], defaults: ResourceDefaults, *, strict: bool = False
) -> ContainerRequest | None:
    """The container's NVIDIA request, or None when it asks for no GPU."""
    names = defaults.names
    cname = str(container.get("name", "?"))
    resources = container.get("resources") or {}
    try:
        return _request(resources, names, defaults, cname)
    except RequestError as e:
        if strict or isinstance(e, LimitError):
            raise
        return None


def _request(
    resources: Mapping[str, Any], names: ResourceNames, defaults: ResourceDefaults, cname: str
) -> ContainerRequest | None:
    raw_gpu = _lookup(resources, names.gpu)
    if raw_gpu is None:
        return None
    nums = _int(raw_gpu, names.gpu, cname)
    if nums <= 0:
        return None
    if nums > MAX_GPUS_PER_CONTAINER:
        raise LimitError(
            f"container {cname} asks for {nums} {names.gpu}; at most {MAX_GPUS_PER_CONTAINER} "
            "per container are supported: ask for fewer, or split the work over containers"
        )

    mem = 0
    raw_mem = _lookup(resources, names.memory)
    if raw_mem is not None:
        mem = _memory(raw_mem, names.memory, cname, defaults.memory_factor)
        if mem < 0 or mem > INT32_MAX:
            raise RequestError(f"container {cname}: {names.memory} {raw_mem!r} is out of range")

    pct = PERCENTAGE_UNSET
    raw_pct = _lookup(resources, names.memory_percentage)
    if raw_pct is not None:
        p = _int(raw_pct, names.memory_percentage, cname)
        if p > 0:
            pct = min(p, 100)

    if pct == PERCENTAGE_UNSET and mem == 0:
        if defaults.default_memory:
            mem = defaults.default_memory
        else:
            pct = 100  # a bare nvidia.com/gpu takes the whole card's memory

    raw_cores = _lookup(resources, names.cores)
    cores = defaults.default_cores if raw_cores is None else _int(raw_cores, names.cores, cname)
    if cores < 0:
        raise RequestError(f"container {cname}: {names.cores} must not be negative")
    return ContainerRequest(nums=nums, memreq=mem, mem_percentage=pct, coresreq=cores)


def _requests(
    containers: Iterable[Mapping[str, Any]], defaults: ResourceDefaults, strict: bool
) -> tuple[ContainerRequest | None, ...]:
    return tuple(container_request(c, defaults, strict=strict) for c in containers)


def pod_request(
    spec: Mapping[str, Any], defaults: ResourceDefaults, *, strict: bool = False
) -> PodRequest:
    request = shared(
        PodRequest(
            init=_requests(spec.get("initContainers") or (), defaults, strict),
            app=_requests(spec.get("containers") or (), defaults, strict),
        )
    )
    count = len(request.init) + len(request.app)
    if request.wants_gpu and count > MAX_CONTAINERS:
        raise LimitError(
            f"pod has {count} containers (init and app together); a GPU pod may have at most "
            f"{MAX_CONTAINERS}: split it into several pods"
        )
    return request


def asks_gpu(container: Mapping[str, Any], names: ResourceNames) -> bool:
    """Whether the container requests or limits a GPU resource."""
    wanted = (names.gpu, names.memory, names.memory_percentage, names.cores)
    resources = container.get("resources") or {}
    return any(
        name in (resources.get(section) or {})
        for section in ("limits", "requests")
        for name in wanted
    )


def names_gpu(spec: Mapping[str, Any], names: ResourceNames) -> bool:
    """Whether any container or init container requests or limits a GPU resource (the chart's
    matchConditions send exactly these pods to the webhook)."""
    return any(
        asks_gpu(c, names)
        for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    )
