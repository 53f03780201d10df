"""Huawei Ascend NPUs (HAMi v2.10's pkg/device/ascend): one family per chip kind.

HAMi reads a list of chip kinds (`vnpus.configs` of its device-config.yaml), each with its
own resource names, registration annotation and vNPU templates. A kind splits a card
either by template (the default, hard split: a memory request rounds up to the smallest
template that holds it, the webhook writes the rounded value) or, when the pod says
`huawei.com/vnpu-mode: hami-core`, by raw memory and a core share (soft split, only on
nodes that offer it). Ascend 910 kinds place several cards by network (HCCS) group, and
the 910C super-pod kind only by whole two-NPU modules.

The templates' aiCore and aiCPU counts are read but, as in HAMi v2.10, never used by the
scheduler: the device plugin derives a vNPU's cores from the template name.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import orjson

from hami.engine import reasons as r
from hami.engine.codec import CodecError, decode_node_devices
from hami.engine.f32 import f32
from hami.engine.families.ascend.config import ChipConfig
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
from hami.engine.families.common import (
    WalkRules,
    card_verdict,
    encode_allocation,
    lookup,
    memory_of,
    quantity_value,
    room,
)
from hami.engine.model import Card, ContainerDevice, ContainerDevices, DeviceInfo, PodDevices
from hami.engine.policy import NodePolicy
from hami.engine.quantity import QuantityError, as_int64, parse_quantity
from hami.engine.requests import INT32_MAX, RequestError

MODE_ANNOTATION = "huawei.com/vnpu-mode"  # pod: "hami-core" asks for the soft split
SOFT = "hami-core"
NODE_SOFT_ANNOTATION = "hami-vnpu-core"  # node: "true" when its cards offer the soft split
TOPOLOGY_PREFIX = "Ascend910"  # kinds whose cards are grouped by NetworkID
SUPER_POD_KIND = "Ascend910C"  # NPUs come in modules of two
NETWORK = "NetworkID"
NETWORK_WEIGHT = 10
VISIBLE_DEVICES = "ASCEND_VISIBLE_DEVICES"
PREDICATE_TIME = "predicate-time"  # seconds since the epoch, as HAMi's bind writes it


def _held(card: DeviceInfo, share: Sequence[ContainerDevice]) -> DeviceInfo:
    """On the soft split a card counts 100 cores, whatever it registered."""
    if any(d.get(MODE_ANNOTATION) == SOFT for d in share):
        return replace(card, devcore=100)
    return card


WALK = WalkRules(held=_held)


def _go_json(value: object) -> str:
    return orjson.dumps(value).decode()


def _network_of(raw: Any) -> int | None:
    """A registered card's NetworkID: HAMi takes it only when it is a JSON number."""
    custom = raw.get("custominfo") if isinstance(raw, dict) else None
    value = custom.get(NETWORK) if isinstance(custom, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def _network(card: DeviceInfo) -> int | None:
    value = card.custom_value(NETWORK)
    return None if value is None else int(value)


@dataclass(frozen=True)
class AscendFamily:
    """One Ascend chip kind (HAMi's ascend.Devices)."""

    config: ChipConfig
    soft_split_default: bool = False  # vnpus.hamiVnpuCore: nodes offer hami-core unless they say

    @cached_property
    def wire(self) -> FamilyWire:
        c = self.config
        word = c.common_word
        return FamilyWire(
            type=word,
            vendor=word,
            resources=FamilyResources(
                c.resource_name,
                c.resource_memory_name,
                c.resource_core_name,
                memory_factor=max(c.memory_factor, 1),
            ),
            register_annotation=f"hami.io/node-register-{word}",
            handshake_annotation=f"hami.io/node-handshake-{word}",
            to_allocate_annotation=f"hami.io/{word}-devices-to-allocate",
            allocated_annotation=f"hami.io/{word}-devices-allocated",
            use_uuid=f"hami.io/use-{word}-uuid",
            nouse_uuid=f"hami.io/no-use-{word}-uuid",
            reads=(MODE_ANNOTATION,),
            # Ascend Docker Runtime mounts the NPUs this names (HAMi's webhook sets it empty in
            # containers asking none, with overwriteEnv).
            device_env=("ASCEND_VISIBLE_DEVICES",),
            # HAMi's Ascend device plugin sets the template the runtime carves a vNPU by, or,
            # under hami-vnpu-core, the memory quota, priority and shared regions it accounts in.
            share_env=(
                "ASCEND_VNPU_SPECS",
                "NPU_MEM_QUOTA",
                "NPU_PRIORITY",
                "NPU_GLOBAL_SHM_PATH",
                "NPU_LOCAL_SHM_PATH",
            ),
        )

    @property
    def runtime_annotation(self) -> str:
        """The pod annotation the Ascend plugin reads each NPU's template or share from."""
        return f"huawei.com/{self.config.common_word}"

    def trim(self, memory: int) -> tuple[int, str]:
        """HAMi's trimMemory: the smallest template holding `memory`, else the whole card
        while it fits the card's capacity, else (0, "")."""
        for t in self.config.templates:
            if memory <= t.memory:
                return t.memory, t.name
        if memory <= self.config.memory_capacity:
            return self.config.memory_allocatable, ""
        return 0, ""

    def decode_node(
        self, annotations: Mapping[str, str], node: NodeFacts = NO_NODE
    ) -> tuple[DeviceInfo, ...] | None:
        value = annotations.get(self.wire.register_annotation)
        if value is None:
            return None
        if not value.strip().startswith("["):
            raise CodecError(f"{self.wire.register_annotation} must be a JSON array")
        cards = decode_node_devices(value)
        # The plugin writes NetworkID as a JSON number, which the shared decoder (strings
        # only) leaves out; and the node's word on the soft split must travel with its
        # cards, as fit sees only those.
        networks = [_network_of(raw) for raw in orjson.loads(value)]
        soft = annotations.get(NODE_SOFT_ANNOTATION)
        out = []
        for card, net in zip(cards, networks, strict=True):
            custom = dict(card.custom)
            if net is not None:
                custom[NETWORK] = str(net)
            if soft is not None:
                custom[NODE_SOFT_ANNOTATION] = "true" if soft == "true" else "false"
            out.append(replace(card, custom=tuple(sorted(custom.items()))))
        return tuple(out)

    def container_request(
        self, container: Mapping[str, Any], *, strict: bool = False
    ) -> FamilyRequest | None:
        """HAMi's GenerateResourceRequests: the raw memory (the webhook rounds it), 0 as the
        percentage when memory is named and 100 when not, cores rounded up."""
        try:
            return self._request(container)
        except (RequestError, QuantityError) as e:
            if strict:
                raise RequestError(str(e)) from e
            return None

    def _request(self, container: Mapping[str, Any]) -> FamilyRequest | None:
        c = self.config
        name = str(container.get("name", "?"))
        res = container.get("resources") or {}
        raw = lookup(res, c.resource_name)
        if raw is None:
            return None
        nums = as_int64(raw)
        if nums is None:
            raise RequestError(f"container {name}: {c.resource_name} {raw!r} is not a whole number")
        if nums == 0:
            return None
        if nums < 0 or nums > INT32_MAX:
            raise RequestError(f"container {name}: {c.resource_name} {raw!r} is out of range")
        mem = 0
        raw_mem = lookup(res, c.resource_memory_name)
        if raw_mem is not None:
            q = parse_quantity(raw_mem)
            if q < 0:
                raise RequestError(f"container {name}: {c.resource_memory_name} is negative")
            if q.denominator == 1:  # HAMi ignores a fractional memory (the whole card then)
                mem = q.numerator * (c.memory_factor if c.memory_factor > 1 else 1)
                if q.numerator > INT32_MAX or mem > INT32_MAX:
                    raise RequestError(
                        f"container {name}: {c.resource_memory_name} {raw_mem!r} is out of "
                        "range (the unit is MiB: ask 16384 for 16 GiB, not 16Gi)"
                    )
        cores = 0
        raw_cores = lookup(res, c.resource_core_name) if c.resource_core_name else None
        if raw_cores is not None:
            cores = quantity_value(raw_cores)
            if cores < 0 or cores > INT32_MAX:
                raise RequestError(f"container {name}: {c.resource_core_name} is out of range")
        return FamilyRequest(self.wire.type, nums, mem, 100 if mem == 0 else 0, cores)

    def fit(
        self, cards: Sequence[Card], request: FamilyRequest, pod: FitPod, allocated: PodDevices
    ) -> FamilyFit:
        mode = pod.annotations.get(MODE_ANNOTATION, "")
        soft = mode == SOFT
        if soft and not self._node_soft(cards):
            return FamilyFit(None, r.card_reasons({r.MODE_NOT_FIT: 1}, len(cards)))
        word = self.config.common_word
        topology = word.startswith(TOPOLOGY_PREFIX) and all(
            _network(c.info) is not None for c in cards
        )
        pairs = word == SUPER_POD_KIND and request.nums > 1
        counts: dict[str, int] = {}
        picked: list[tuple[DeviceInfo, ContainerDevice]] = []
        extra = ((MODE_ANNOTATION, mode),) if mode else ()
        for card in reversed(cards):
            mem = memory_of(card.info, request)
            device = ContainerDevice(
                card.info.id, mem, min(request.coresreq, 100), word, extra=extra
            )
            why = card_verdict(card, request, pod, self.wire, WALK, device)
            if why is not None:
                counts[why] = counts.get(why, 0) + 1
                continue
            picked.append((card.info, device))
            if not topology and not pairs and len(picked) == request.nums:
                return FamilyFit(tuple(d for _, d in picked))
        if pairs:
            chosen = _whole_modules(picked, request.nums)
            if len(chosen) != request.nums:
                counts[r.ALLOCATED_CARDS_INSUFFICIENT] = len(chosen)
                # HAMi counts this failure against the request, not the node's cards.
                return FamilyFit(None, r.card_reasons(counts, request.nums))
            return FamilyFit(chosen)
        if topology and len(picked) == request.nums:
            return FamilyFit(tuple(d for _, d in picked))
        if topology and len(picked) > request.nums:
            return FamilyFit(_by_network(picked, request.nums))
        if picked:
            counts[r.ALLOCATED_CARDS_INSUFFICIENT] = len(picked)
        return FamilyFit(None, r.card_reasons(counts, len(cards)))

    def _node_soft(self, cards: Sequence[Card]) -> bool:
        """Whether the node offers the soft split: its annotation, else the global default."""
        word = cards[0].info.custom_value(NODE_SOFT_ANNOTATION) if cards else None
        return word == "true" if word else self.soft_split_default

    def room(self, card: Card, share: ContainerDevices) -> str | None:
        return room(card, share, WALK)

    def score_node(self, cards: Sequence[Card], devices: PodDevices, policy: NodePolicy) -> float:
        """HAMi's ScoreNode: per container, the share of its NPUs in its largest network
        group, times 10; 0 for non-910 kinds or when a card has no NetworkID."""
        if not self.config.common_word.startswith(TOPOLOGY_PREFIX):
            return 0.0
        networks = {c.info.id: _network(c.info) for c in cards}
        score = 0.0
        for container in devices:
            group: dict[int, int] = {}
            for d in container:
                net = networks.get(d.uuid)
                if net is None:
                    return 0.0
                group[net] = group.get(net, 0) + 1
            if group:
                score = f32(score + f32(f32(max(group.values())) / f32(sum(group.values()))))
        return f32(score * NETWORK_WEIGHT)  # Go float32 throughout, as HAMi's

    def annotations(self, devices: PodDevices, bind: BindContext = NO_BIND) -> dict[str, str]:
        """The two allocation lists, and per NPU its template (hard split) or its memory and
        cores (soft split) under `huawei.com/<kind>`, and the bind's time as `predicate-time`."""
        out = encode_allocation(self.wire, devices)
        if not out:
            return out
        runtime = []
        for container in devices:
            for d in container:
                info: dict[str, object] = {"UUID": d.uuid} if d.uuid else {}
                if d.get(MODE_ANNOTATION) != SOFT:
                    template = self.trim(d.usedmem)[1]
                    if template:
                        info["temp"] = template
                if d.usedmem:
                    info["memory"] = d.usedmem
                if d.usedcores:
                    info["core"] = d.usedcores
                runtime.append(info)
        out[self.runtime_annotation] = _go_json(runtime)
        out[PREDICATE_TIME] = str(bind.now_ns // 1_000_000_000)
        return out

    def claim(self, container: Mapping[str, Any], pod: Mapping[str, Any]) -> Claim:
        """HAMi's MutateAdmission (quantities read as Go's Value(): rounded up)."""
        c = self.config
        res = container.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        if c.resource_name not in limits:
            return Claim(False, env=((VISIBLE_DEVICES, ""),) if c.overwrite_env else ())
        count = quantity_value(limits[c.resource_name])
        set_limits: list[tuple[str, str]] = []
        set_requests: list[tuple[str, str]] = []
        if c.common_word == SUPER_POD_KIND and c.super_pod:
            if count == 1:  # one module is the smallest unit: two NPUs
                set_limits.append((c.resource_name, "2"))
                if c.resource_name in requests:
                    set_requests.append((c.resource_name, "2"))
            elif count % 2:
                return Claim(
                    False, error=f"{SUPER_POD_KIND} device request must be 1 or 2*n, got {count}"
                )
        meta = pod.get("metadata") or {}
        soft = (meta.get("annotations") or {}).get(MODE_ANNOTATION) == SOFT
        if not soft and c.resource_core_name:
            core = limits.get(c.resource_core_name, requests.get(c.resource_core_name))
            if core is not None and quantity_value(core) > 0:
                return Claim(
                    False,
                    error=f"{c.resource_core_name} is only supported in hami-core (soft split) mode",
                )
        memory = c.memory_allocatable
        if c.resource_memory_name in limits:
            asked = quantity_value(limits[c.resource_memory_name])
            memory = asked if soft else self.trim(asked)[0]
            if memory <= 0:
                return Claim(False, error=f"{c.resource_memory_name} {asked} is invalid")
        if count > 1 and not soft and memory != c.memory_allocatable:
            return Claim(True, error="vNPU not supported for multiple devices")
        set_limits.append((c.resource_memory_name, str(memory)))
        set_requests.append((c.resource_memory_name, str(memory)))
        runtime = c.runtime_class_name
        return Claim(
            True,
            pod_fields=(("runtimeClassName", runtime),) if runtime else (),
            limits=tuple(set_limits),
            requests=tuple(set_requests),
        )


def _whole_modules(
    picked: Sequence[tuple[DeviceInfo, ContainerDevice]], nums: int
) -> tuple[ContainerDevice, ...]:
    """HAMi's computeBestCombination910C: whole two-NPU modules (index // 2), in the order the
    walk met them, until the request is covered. (HAMi sorts the modules fullest first, in
    random order among equals; as only full modules are taken, the walk's order is the
    deterministic choice among HAMi's.)"""
    modules: dict[int, list[ContainerDevice]] = {}
    for info, device in picked:
        modules.setdefault(info.index // 2, []).append(device)
    out: list[ContainerDevice] = []
    left = nums
    for module in modules.values():
        if left <= 0:
            break
        if len(module) == 2:
            out.extend(module)
            left -= 2
    return tuple(out)


def _by_network(
    picked: Sequence[tuple[DeviceInfo, ContainerDevice]], nums: int
) -> tuple[ContainerDevice, ...]:
    """HAMi's computeBestCombination: NPUs from the fullest network groups first. HAMi orders
    groups of equal size at random; we keep the order the walk met them in."""
    if nums == 1:
        return (picked[0][1],)
    groups: dict[int, list[ContainerDevice]] = {}
    for info, device in picked:
        net = _network(info)
        if net is not None:
            groups.setdefault(net, []).append(device)
    ordered = [d for g in sorted(groups.values(), key=len, reverse=True) for d in g]
    return tuple(ordered[:nums])
