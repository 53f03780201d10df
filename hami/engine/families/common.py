"""What most of HAMi's device families share: the per-card walk, the request reader,
the registration decoder and the two allocation annotations.

HAMi v2.10 writes each family's Fit separately, but most are one walk with small
differences (which checks apply, what a bare count request takes). The walk is written
once here with those differences as options, so each family module states only how it
differs; a family whose rules are not this walk (Ascend's templates, MetaX's sGPU)
writes its own fit and may still use the pieces.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami.engine import reasons as r
from hami.engine.codec import decode_node_devices, encode_pod_devices, split_list
from hami.engine.families.base import Claim, FamilyFit, FamilyRequest, FamilyWire, FitPod
from hami.engine.model import PERCENTAGE_UNSET, Card, ContainerDevice, DeviceInfo, PodDevices
from hami.engine.quantity import QuantityError, as_int64
from hami.engine.requests import INT32_MAX, MAX_GPUS_PER_CONTAINER, LimitError, RequestError


def lookup(resources: Mapping[str, Any], name: str) -> Any:
    """A resource's value from limits, else requests (HAMi reads both in that order)."""
    for section in ("limits", "requests"):
        values = resources.get(section) or {}
        if name in values:
            return values[name]
    return None


def whole(value: Any, resource: str, container: str) -> int:
    """A whole-number quantity, or RequestError naming the container and resource."""
    try:
        n = as_int64(value)
    except QuantityError as e:
        raise RequestError(f"container {container}: {resource}: {e}") from e
    if n is None or n < 0 or n > INT32_MAX:
        raise RequestError(
            f"container {container}: {resource} must be a whole number from 0 to {INT32_MAX}, "
            f"got {value!r}"
        )
    return n


@dataclass(frozen=True, slots=True)
class RequestRules:
    """How a family reads a container's count, memory and cores (they differ in defaults)."""

    default_cores: int = 0  # cores when the container names none (Hygon: 100)
    # A count without memory takes the whole device (percentage 100), as most families do.
    whole_when_no_memory: bool = True


def read_request(
    container: Mapping[str, Any], wire: FamilyWire, rules: RequestRules, *, strict: bool
) -> FamilyRequest | None:
    """HAMi's GenerateResourceRequests for a count/memory/cores family."""
    names = wire.resources
    cname = str(container.get("name", "?"))
    resources = container.get("resources") or {}
    try:
        raw = lookup(resources, names.count)
        if raw is None:
            return None
        nums = whole(raw, names.count, cname)
        if nums == 0:
            return None
        if nums > MAX_GPUS_PER_CONTAINER:
            raise LimitError(
                f"container {cname} asks for {nums} {names.count}; at most "
                f"{MAX_GPUS_PER_CONTAINER} per container are supported"
            )
        mem = 0
        raw_mem = lookup(resources, names.memory) if names.memory else None
        if raw_mem is not None:
            mem = whole(raw_mem, names.memory, cname) * names.memory_factor
            if mem > INT32_MAX:
                raise RequestError(f"container {cname}: {names.memory} {raw_mem!r} is out of range")
        cores = rules.default_cores
        raw_cores = lookup(resources, names.cores) if names.cores else None
        if raw_cores is not None:
            cores = whole(raw_cores, names.cores, cname)
    except RequestError as e:
        if strict or isinstance(e, LimitError):
            raise
        return None
    pct = 100 if mem == 0 and rules.whole_when_no_memory else PERCENTAGE_UNSET
    return FamilyRequest(wire.type, nums, mem, pct, cores)


def decode_registration(
    annotations: Mapping[str, str], wire: FamilyWire
) -> tuple[DeviceInfo, ...] | None:
    """The cards in the family's registration annotation (HAMi's DecodeNodeDevices)."""
    value = annotations.get(wire.register_annotation)
    if value is None:
        return None
    return decode_node_devices(value)


def encode_allocation(wire: FamilyWire, devices: PodDevices) -> dict[str, str]:
    """HAMi's PatchAnnotations for most families: the same list under both keys."""
    if not any(devices):
        return {}
    text = encode_pod_devices(devices)
    return {wire.to_allocate_annotation: text, wire.allocated_annotation: text}


def claim_by_count(container: Mapping[str, Any], wire: FamilyWire) -> Claim:
    """HAMi's MutateAdmission for most families: claimed when the count is a limit."""
    limits = (container.get("resources") or {}).get("limits") or {}
    return Claim(claimed=wire.resources.count in limits)


def type_allowed(annotations: Mapping[str, str], model: str, wire: FamilyWire) -> bool:
    """HAMi's CheckType: use/nouse lists matched as case-insensitive substrings of the model."""
    upper = model.upper()

    def match(value: str) -> bool:
        return any(t and t.upper() in upper for t in split_list(value))

    use = annotations.get(wire.use_type, "").strip() if wire.use_type else ""
    if use and not match(use):
        return False
    nouse = annotations.get(wire.nouse_type, "").strip() if wire.nouse_type else ""
    return not (nouse and match(nouse))


def uuid_allowed(annotations: Mapping[str, str], uuid: str, wire: FamilyWire) -> bool:
    """HAMi's CheckUUID: use/nouse lists of exact device ids; an empty value is no constraint."""
    use = annotations.get(wire.use_uuid, "").strip() if wire.use_uuid else ""
    if use and uuid not in split_list(use):
        return False
    nouse = annotations.get(wire.nouse_uuid, "").strip() if wire.nouse_uuid else ""
    return not (nouse and uuid in split_list(nouse))


@dataclass(frozen=True, slots=True)
class WalkRules:
    """Which of HAMi's per-card checks a family's Fit makes."""

    mutex: bool = True  # the `mutex` GPU policy keeps used cards out
    cores: bool = True  # core requests are checked against free cores
    exclusive_full_core: bool = True  # 100 cores on a 100-core card wants it alone
    core_exhausted: bool = True  # a core-less request cannot join a card whose cores are gone


def memory_of(card: DeviceInfo, request: FamilyRequest) -> int:
    """MiB the request takes on `card`: explicit MiB, else the percentage of its memory."""
    if request.memreq > 0:
        return request.memreq
    if request.mem_percentage != PERCENTAGE_UNSET:
        return card.devmem * request.mem_percentage // 100
    return 0


def card_verdict(
    card: Card, request: FamilyRequest, pod: FitPod, wire: FamilyWire, rules: WalkRules
) -> str | None:
    """The reason `card` cannot take one device of the request, in HAMi's check order."""
    info, usage = card.info, card.usage
    if not card.healthy:
        return r.CARD_NOT_HEALTH
    if not type_allowed(pod.annotations, info.type, wire):
        return r.CARD_TYPE_MISMATCH
    if not uuid_allowed(pod.annotations, info.id, wire):
        return r.CARD_UUID_MISMATCH
    if info.count <= usage.used:
        return r.CARD_TIME_SLICING_EXHAUSTED
    if rules.mutex and pod.mutex and usage.used > 0:
        return r.EXCLUSIVE_CONFLICT
    cores = min(request.coresreq, 100)
    if info.devmem - usage.usedmem < memory_of(info, request):
        return r.CARD_INSUFFICIENT_MEMORY
    if rules.cores and info.devcore - usage.usedcores < cores:
        return r.CARD_INSUFFICIENT_CORE
    if rules.exclusive_full_core and info.devcore == 100 and cores == 100 and usage.used > 0:
        return r.EXCLUSIVE_CONFLICT
    if (
        rules.core_exhausted
        and info.devcore != 0
        and usage.usedcores == info.devcore
        and cores == 0
    ):
        return r.CARD_COMPUTE_UNITS_EXHAUSTED
    return None


def walk(
    cards: Sequence[Card],
    request: FamilyRequest,
    pod: FitPod,
    wire: FamilyWire,
    rules: WalkRules = WalkRules(),
    custom: Callable[[Card], str | None] | None = None,
) -> FamilyFit:
    """HAMi's common Fit: the cards from the tail, the first `nums` that pass are taken.

    `custom` is a family's own last check (HAMi's customFilterRule): a reason or None."""
    counts: dict[str, int] = {}
    picked: list[ContainerDevice] = []
    cores = min(request.coresreq, 100)
    for card in reversed(cards):
        why = card_verdict(card, request, pod, wire, rules)
        if why is None and custom is not None:
            why = custom(card)
        if why is not None:
            counts[why] = counts.get(why, 0) + 1
            continue
        picked.append(
            ContainerDevice(card.info.id, memory_of(card.info, request), cores, wire.type)
        )
        if len(picked) == request.nums:
            return FamilyFit(tuple(picked))
    if picked:
        counts[r.ALLOCATED_CARDS_INSUFFICIENT] = len(picked)
    return FamilyFit(None, r.card_reasons(counts, len(cards)))
