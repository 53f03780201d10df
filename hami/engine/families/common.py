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
from math import ceil
from typing import Any, Literal

from hami.engine import reasons as r
from hami.engine.checks import Over, beyond
from hami.engine.codec import CodecError, decode_node_devices, encode_pod_devices, split_list
from hami.engine.families.base import (
    Claim,
    FamilyFit,
    FamilyRequest,
    FamilyWire,
    FitPod,
)
from hami.engine.model import (
    PERCENTAGE_UNSET,
    Card,
    ContainerDevice,
    DeviceInfo,
    PodDevices,
    Usage,
)
from hami.engine.policy import filtered_out
from hami.engine.quantity import QuantityError, as_int64, parse_quantity
from hami.engine.requests import INT32_MAX, MAX_GPUS_PER_CONTAINER, LimitError, RequestError


def lookup(resources: Mapping[str, Any], name: str, *, limits_only: bool = False) -> Any:
    """A resource's value from limits, else requests (HAMi reads both in that order;
    a few families read limits alone)."""
    for section in ("limits",) if limits_only else ("limits", "requests"):
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
    limits_only: bool = False  # HAMi reads the family's resources from limits alone
    # A core value that is not a whole number is ignored (the default stands), where
    # HAMi's family skips a failed AsInt64 instead of refusing the request.
    lenient_cores: bool = False
    # Cores outside this range make the request void (HAMi refuses it in the family).
    cores_range: tuple[int, int] = (0, INT32_MAX)
    # Memory and cores are asked for the container as a whole and split evenly over its
    # devices (Go's integer division), not per device.
    per_device_split: bool = False


def read_request(
    container: Mapping[str, Any], wire: FamilyWire, rules: RequestRules, *, strict: bool
) -> FamilyRequest | None:
    """HAMi's GenerateResourceRequests for a count/memory/cores family."""
    names = wire.resources
    cname = str(container.get("name", "?"))
    resources = container.get("resources") or {}
    try:
        raw = lookup(resources, names.count, limits_only=rules.limits_only)
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
        raw_mem = (
            lookup(resources, names.memory, limits_only=rules.limits_only) if names.memory else None
        )
        if raw_mem is not None:
            mem = whole(raw_mem, names.memory, cname) * names.memory_factor
            if mem > INT32_MAX:
                raise RequestError(f"container {cname}: {names.memory} {raw_mem!r} is out of range")
        cores = read_cores(resources, names.cores, cname, rules)
    except RequestError as e:
        if strict or isinstance(e, LimitError):
            raise
        return None
    pct = 100 if mem == 0 and rules.whole_when_no_memory else PERCENTAGE_UNSET
    if rules.per_device_split:
        mem, cores = mem // nums, cores // nums
    return FamilyRequest(wire.type, nums, mem, pct, cores)


def read_cores(resources: Mapping[str, Any], name: str, cname: str, rules: RequestRules) -> int:
    """The container's cores of each device, HAMi's family default when it names none."""
    raw = lookup(resources, name, limits_only=rules.limits_only) if name else None
    if raw is None:
        return rules.default_cores
    if rules.lenient_cores and as_whole(raw) is None:
        return rules.default_cores
    cores = whole(raw, name, cname)
    low, high = rules.cores_range
    if not low <= cores <= high:
        raise RequestError(f"container {cname}: {name} must be from {low} to {high}, got {raw!r}")
    return cores


def quantity_value(value: Any) -> int:
    """Go's Quantity.Value(), which webhooks read counts with: rounded up to a whole number
    (0 for what is no quantity)."""
    try:
        return ceil(parse_quantity(value))
    except QuantityError:
        return 0


def as_whole(value: Any) -> int | None:
    """The quantity as an integer, None where Go's AsInt64 fails (a fraction, garbage)."""
    try:
        return as_int64(value)
    except QuantityError:
        return None


Form = Literal["any", "json", "legacy"]


def decode_registration(
    annotations: Mapping[str, str], wire: FamilyWire, form: Form = "any"
) -> tuple[DeviceInfo, ...] | None:
    """The cards in the family's registration annotation (HAMi's DecodeNodeDevices).

    `form` is the one format the family's HAMi code reads, where it reads only one:
    UnMarshalNodeDevices (JSON) or DecodeNodeDevices (the `:`-separated list)."""
    value = annotations.get(wire.register_annotation)
    if value is None:
        return None
    is_json = value.strip().startswith("[")
    if form == "json" and not is_json:
        raise CodecError(f"{wire.register_annotation} must be a JSON array, got {value!r}")
    if form == "legacy" and (
        is_json
        or ":" not in value
        or any(len(p.split(",")) not in (7, 9) for p in value.split(":") if p)
    ):
        raise CodecError(
            f"{wire.register_annotation} must be the `:`-separated list of cards of 7 or 9 "
            f"fields, got {value!r}"
        )
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


# What one device of a request takes of a card (MiB, or cores), by the family's rule.
Amount = Callable[[DeviceInfo, FamilyRequest], int]


def memory_of(card: DeviceInfo, request: FamilyRequest) -> int:
    """MiB the request takes on `card`: explicit MiB, else the percentage of its memory."""
    if request.memreq > 0:
        return request.memreq
    if request.mem_percentage != PERCENTAGE_UNSET:
        return card.devmem * request.mem_percentage // 100
    return 0


def capped_cores(card: DeviceInfo, request: FamilyRequest) -> int:
    """The cores asked, at most 100 (HAMi clamps a larger ask instead of refusing it)."""
    return min(request.coresreq, 100)


def nothing(card: DeviceInfo, request: FamilyRequest) -> int:
    """Families that count devices only record neither memory nor cores."""
    return 0


# The card as a family's fit counts room on it for a pod's devices there (Ascend's soft split
# counts 100 cores whatever the card registered).
Held = Callable[[DeviceInfo, Sequence[ContainerDevice]], DeviceInfo]


def registered(card: DeviceInfo, share: Sequence[ContainerDevice]) -> DeviceInfo:
    """The card as it registered: what most families count room on."""
    return card


@dataclass(frozen=True, slots=True)
class WalkRules:
    """Which of HAMi's per-card checks a family's Fit makes, and what a device takes."""

    cores: bool = True  # core requests are checked against free cores
    exclusive_full_core: bool = True  # 100 cores on a 100-core card wants it alone
    core_exhausted: bool = True  # a core-less request cannot join a card whose cores are gone
    memory: Amount = memory_of
    core_amount: Amount = capped_cores
    # The allocation entry names the card's model instead of the family's type.
    card_type: bool = False
    held: Held = registered


# Families that count devices only: the split count and `mutex` decide, and a device
# records no memory or cores.
COUNT_ONLY = WalkRules(
    cores=False,
    exclusive_full_core=False,
    core_exhausted=False,
    memory=nothing,
    core_amount=nothing,
)

# A family's own check of a card, made after the common ones (None: the card passes).
Check = Callable[[Card], str | None]


def taken(
    info: DeviceInfo, request: FamilyRequest, wire: FamilyWire, rules: WalkRules
) -> ContainerDevice:
    """The allocation entry for one device of the request on `info`."""
    kind = info.type if rules.card_type else wire.type
    return ContainerDevice(
        info.id, rules.memory(info, request), rules.core_amount(info, request), kind
    )


def over(
    card: DeviceInfo, counted: Usage, share: Sequence[ContainerDevice], rules: WalkRules
) -> Over | None:
    """The walk's room rule (hami.engine.checks.beyond): what `counted`, `share` (one pod's
    devices on the card) among it, holds more of than the card as the family counts it."""
    held, u = rules.held(card, share), counted
    return beyond(held, u.used, u.usedmem, u.usedcores, cores=rules.cores)


def room(card: Card, share: Sequence[ContainerDevice], rules: WalkRules) -> str | None:
    """Family.room for a family whose fit is the walk: `over` of what the cache counts."""
    got = over(card.info, card.usage, share, rules)
    return None if got is None else str(got)


def card_verdict(
    card: Card,
    request: FamilyRequest,
    pod: FitPod,
    wire: FamilyWire,
    rules: WalkRules,
    device: ContainerDevice | None = None,
) -> str | None:
    """The reason `card` cannot take one device of the request (`device`, where the family
    makes its own entry), in HAMi's check order."""
    info, usage = card.info, card.usage
    if not card.healthy:
        return r.CARD_NOT_HEALTH
    if not type_allowed(pod.annotations, info.type, wire):
        return r.CARD_TYPE_MISMATCH
    if not uuid_allowed(pod.annotations, info.id, wire):
        return r.CARD_UUID_MISMATCH
    if info.count <= usage.used:
        return r.CARD_TIME_SLICING_EXHAUSTED
    filtered = filtered_out(pod.filters, usage.used)
    if filtered is not None:
        return filtered
    device = device or taken(info, request, wire, rules)
    cores = device.usedcores
    after = usage + Usage(1, device.usedmem, cores)
    full = over(info, after, (device,), rules)
    if full is not None:
        return full.reason
    held = rules.held(info, (device,))
    if rules.exclusive_full_core and held.devcore == 100 and cores == 100 and usage.used > 0:
        return r.EXCLUSIVE_CONFLICT
    if (
        rules.core_exhausted
        and held.devcore != 0
        and usage.usedcores == held.devcore
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
    check: Check | None = None,
) -> FamilyFit:
    """HAMi's common Fit: the cards from the tail, the first `nums` that pass are taken."""
    counts: dict[str, int] = {}
    picked: list[ContainerDevice] = []
    for card in reversed(cards):
        why = card_verdict(card, request, pod, wire, rules)
        if why is None and check is not None:
            why = check(card)
        if why is not None:
            counts[why] = counts.get(why, 0) + 1
            continue
        picked.append(taken(card.info, request, wire, rules))
        if len(picked) == request.nums:
            return FamilyFit(tuple(picked))
    if picked:
        counts[r.ALLOCATED_CARDS_INSUFFICIENT] = len(picked)
    return FamilyFit(None, r.card_reasons(counts, len(cards)))
