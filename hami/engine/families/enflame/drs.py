"""Enflame DRS shares (HAMi v2.10's pkg/device/enflame/device.go)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from hami.engine import reasons as r
from hami.engine.checks import Over, beyond
from hami.engine.codec import encode_pod_devices
from hami.engine.families.base import (
    NO_BIND,
    NO_NODE,
    BindContext,
    Claim,
    FamilyFit,
    FamilyRequest,
    FamilyResources,
    FamilyWire,
    FitPod,
    NodeFacts,
)
from hami.engine.families.common import lookup, quantity_value, uuid_allowed
from hami.engine.families.enflame.profiles import BY_SLICES, BY_SPEC, DRS, atoi, choose, decode_drs
from hami.engine.model import Card, ContainerDevice, ContainerDevices, DeviceInfo, PodDevices, Usage
from hami.engine.policy import NodePolicy, filtered_out
from hami.engine.quantity import QuantityError, as_int64
from hami.engine.requests import INT32_MAX, RequestError

# The annotations the bind writes for the plugin.
ASSIGNED = "enflame.com/gcu-assigned"
ASSIGNED_TIME = "enflame.com/gcu-assigned-time"
ASSIGNED_INDEX = "enflame.com/gcu-assigned-index"
ASSIGNED_ID = "enflame.com/gcu-assigned-id"
ASSIGNED_MINOR = "enflame.com/gcu-assigned-minor"
REQUEST_SIZE = "enflame.com/gcu-request-size"
ASSIGNED_CONTAINERS = "assigned-containers"


def _slices(device: ContainerDevice) -> int:
    """The DRS slices a device holds; 1 where unknown (HAMi counts one for an allocation
    read back from a pod, whose profile is not on the wire)."""
    return max(atoi(device.get("drsSlice")) or 1, 1)


def _over(card: DeviceInfo, counted: Usage) -> Over | None:
    """The room rule (hami.engine.checks.beyond) as HAMi's Enflame fit counts it: the card's
    cores only where it registered some."""
    u = counted
    return beyond(card, u.used, u.usedmem, u.usedcores, cores=card.devcore > 0)


@dataclass(frozen=True)
class DrsFamily:
    """DRS shares of GCUs (HAMi's EnflameDevices)."""

    wire: FamilyWire

    def decode_node(
        self, annotations: Mapping[str, str], node: NodeFacts = NO_NODE
    ) -> tuple[DeviceInfo, ...] | None:
        value = annotations.get(self.wire.register_annotation)
        return None if value is None else decode_drs(value, node.name)

    def container_request(
        self, container: Mapping[str, Any], *, strict: bool = False
    ) -> FamilyRequest | None:
        """HAMi's GenerateResourceRequests: one share, by slices when the count is a positive
        whole number, else by memory and cores (rounded up) when either is named."""
        names = self.wire.resources
        res = container.get("resources") or {}
        try:
            raw = lookup(res, names.count)
            slices = as_int64(raw) if raw is not None else None
            if slices is not None and slices > 0:
                if slices > INT32_MAX:
                    raise RequestError(f"{names.count} {raw!r} is out of range")
                return FamilyRequest(DRS, 1, slices, BY_SLICES, 0)
            if raw is not None and strict:
                raise RequestError(f"{names.count} must be a positive whole number, got {raw!r}")
            raw_mem, raw_cores = lookup(res, names.memory), lookup(res, names.cores)
            if raw_mem is None and raw_cores is None:
                return None
            mem = quantity_value(raw_mem) if raw_mem is not None else 0
            cores = quantity_value(raw_cores) if raw_cores is not None else 0
            if mem > INT32_MAX or cores > INT32_MAX:
                raise RequestError(f"{names.memory} or {names.cores} is out of range")
        except (RequestError, QuantityError) as e:
            if strict:
                raise RequestError(f"container {container.get('name', '?')}: {e}") from e
            return None
        return FamilyRequest(DRS, 1, mem, BY_SPEC, cores)

    def fit(
        self, cards: Sequence[Card], request: FamilyRequest, pod: FitPod, allocated: PodDevices
    ) -> FamilyFit:
        """HAMi's Enflame Fit: the profile first (ModeNotFit when none suits), then the
        first card from the tail with its slices, memory and cores free."""
        chosen = choose(cards, request)
        if chosen is None or chosen.size > INT32_MAX or chosen.memory_gb > INT32_MAX // 1024:
            return FamilyFit(None, r.card_reasons({r.MODE_NOT_FIT: 1}, len(cards)))
        memory = chosen.memory_gb * 1024
        # HAMi counts a share's slices on its card while fitting the pod's later containers;
        # the cards here count each earlier share of this pod as one.
        earlier: dict[str, int] = {}
        for container in allocated:
            for d in container:
                earlier[d.uuid] = earlier.get(d.uuid, 0) + _slices(d) - 1
        counts: dict[str, int] = {}
        for card in reversed(cards):
            info, usage = card.info, card.usage
            used = usage.used + earlier.get(info.id, 0)
            why = None
            if not card.healthy:
                why = r.CARD_NOT_HEALTH
            elif not uuid_allowed(pod.annotations, info.id, self.wire):
                why = r.CARD_UUID_MISMATCH
            elif info.count <= used:
                why = r.CARD_TIME_SLICING_EXHAUSTED
            elif (filtered := filtered_out(pod.filters, used)) is not None:
                why = filtered
            elif (full := _over(info, usage + Usage(1, memory, chosen.cores))) is not None:
                why = full.reason
            if why is not None:
                counts[why] = counts.get(why, 0) + 1
                continue
            extra = {
                "drsSlice": str(chosen.size),
                "index": info.custom_value("index") or "",
                "minor": info.custom_value("minor") or "",
                "profileID": chosen.id,
                "profileName": chosen.name,
            }
            device = ContainerDevice(info.id, memory, chosen.cores, DRS, extra=tuple(extra.items()))
            return FamilyFit((device,))  # a DRS request is always one share
        return FamilyFit(None, r.card_reasons(counts, len(cards)))

    def room(self, card: Card, share: ContainerDevices) -> str | None:
        got = _over(card.info, card.usage)
        return None if got is None else str(got)

    def score_node(self, cards: Sequence[Card], devices: PodDevices, policy: NodePolicy) -> float:
        return 0.0

    def annotations(self, devices: PodDevices, bind: BindContext = NO_BIND) -> dict[str, str]:
        """HAMi's PatchAnnotations: the allocation, and for the plugin the first share's
        card, its profile per container name, and the bind's time."""
        if not any(devices):
            return {}
        out = {
            self.wire.allocated_annotation: encode_pod_devices(devices),
            ASSIGNED: "false",
            ASSIGNED_TIME: str(bind.now_ns),
        }
        assigned: dict[str, dict[str, object]] = {}
        for position, container in enumerate(devices):
            if not container:
                continue
            first = container[0]
            slices = _slices(first)
            entry: dict[str, object] = {"allocated": False, "request": slices}
            for key in ("profileID", "profileName"):
                if first.get(key):
                    entry[key] = first.get(key)
            assigned[_container_name(bind, position)] = entry
            if first.get("index"):
                out.setdefault(ASSIGNED_INDEX, first.get("index"))
                out.setdefault(ASSIGNED_ID, first.get("index"))
            if first.get("minor"):
                out.setdefault(ASSIGNED_MINOR, first.get("minor"))
            out.setdefault(REQUEST_SIZE, str(slices))
        # Go writes a map's keys sorted and a struct's fields in their declared order.
        out[ASSIGNED_CONTAINERS] = orjson.dumps(dict(sorted(assigned.items()))).decode()
        return out

    def claim(self, container: Mapping[str, Any], pod: Mapping[str, Any]) -> Claim:
        """HAMi's MutateAdmission: a slice count must be positive; memory must be positive and
        cores within (0, 100]; a value named only as a request is copied to the limits
        and the other way round."""
        res = container.get("resources") or {}
        return _claim(self.wire.resources, res.get("limits") or {}, res.get("requests") or {})


def _claim(names: FamilyResources, limits: Mapping[str, Any], requests: Mapping[str, Any]) -> Claim:
    """A value named only as a limit is copied to the requests and the other way round."""
    count = limits.get(names.count, requests.get(names.count))
    if count is not None:
        if quantity_value(count) <= 0:
            return Claim(False, error=f"{names.count} must be greater than 0")
        return Claim(
            True,
            limits=_missing(limits, names.count, count),
            requests=_missing(requests, names.count, count),
        )
    memory = limits.get(names.memory, requests.get(names.memory))
    cores = limits.get(names.cores, requests.get(names.cores))
    if memory is None and cores is None:
        return Claim(False)
    if memory is not None and quantity_value(memory) <= 0:
        return Claim(False, error=f"{names.memory} must be greater than 0")
    if cores is not None and not 0 < quantity_value(cores) <= 100:
        return Claim(False, error=f"{names.cores} must be in range (0,100]")
    to_limits: tuple[tuple[str, str], ...] = ()
    to_requests: tuple[tuple[str, str], ...] = ()
    for name, value in ((names.memory, memory), (names.cores, cores)):
        if value is not None:
            to_limits += _missing(limits, name, value)
            to_requests += _missing(requests, name, value)
    return Claim(True, limits=to_limits, requests=to_requests)


def _missing(section: Mapping[str, Any], name: str, value: Any) -> tuple[tuple[str, str], ...]:
    return () if name in section else ((name, str(value)),)


def _container_name(bind: BindContext, position: int) -> str:
    """HAMi's containerNameByIndex: init containers first, else `container-<i>`."""
    if position < len(bind.containers):
        return str(bind.containers[position].get("name", f"container-{position}"))
    return f"container-{position}"
