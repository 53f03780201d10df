"""MetaX sGPU: cards shared by memory and compute (HAMi's pkg/device/metax/sdevice.go).

Unlike the common walk, HAMi first collects every card that could take the container,
then chooses among them: an online pod the cards with the fewest online pods, a container
asking for whole cards (100 vcore) the best-linked ones; otherwise the first in walk order.
Its node score is policy-neutral (higher is better), weighted 10000 and negated under
spread, and only for online pods or, with topology awareness on, whole cards.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from hami.engine import reasons as r
from hami.engine.checks import Over, beyond
from hami.engine.codec import encode_pod_devices
from hami.engine.f32 import f32
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
from hami.engine.families.common import uuid_allowed
from hami.engine.families.metax import qos, registration, topology
from hami.engine.families.metax.config import (
    APP_CLASS,
    DEFAULT,
    NOUSE_UUID,
    QOS_POLICY,
    SGPU_PLUGIN_ALLOCATED,
    SGPU_PREDICATE_TIME,
    SGPU_REGISTER,
    SGPU_TYPE,
    TOPOLOGY_AWARE,
    USE_UUID,
    MetaxConfig,
)
from hami.engine.families.metax.registration import qos_of, zone_of
from hami.engine.families.metax.request import GIB_IN_MIB, read
from hami.engine.model import Card, ContainerDevice, ContainerDevices, DeviceInfo, PodDevices, Usage
from hami.engine.policy import NodePolicy, filtered_out

ALLOCATED = "hami.io/metax-sgpu-devices-allocated"
# HAMi's own reasons for this type (the common walk says CardNotHealth).
CARD_UNHEALTHY = "CardUnhealthy"
CARD_QOS_MISMATCH = "CardQosPolicyMismatch"
CARD_APP_CLASS_MISMATCH = "CardAppClassMismatch"
# How HAMi weighs a policy-neutral family score against the base node score.
NEUTRAL_WEIGHT = 10000
# HAMi's policy layer's weight of a policy-neutral score, per node policy (a policy missing here
# is a KeyError, never another's score).
_WEIGHT = {NodePolicy.BINPACK: NEUTRAL_WEIGHT, NodePolicy.SPREAD: -NEUTRAL_WEIGHT}
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def _memory(info: DeviceInfo, request: FamilyRequest) -> int:
    if request.memreq > 0:
        return request.memreq
    return info.devmem * request.mem_percentage // 100


def _over(card: DeviceInfo, counted: Usage, *, counted_cores: bool) -> Over | None:
    """The room rule (hami.engine.checks.beyond) as HAMi's sGPU fit counts it: the cores only
    for a pod that takes some."""
    u = counted
    return beyond(card, u.used, u.usedmem, u.usedcores, cores=counted_cores)


class MetaxSgpu:
    """The shared MetaX sGPU family (HAMi's `Metax-SGPU` device type)."""

    def __init__(self, config: MetaxConfig = DEFAULT) -> None:
        self._topology_aware = config.topology_aware
        self._wire = FamilyWire(
            type=SGPU_TYPE,
            vendor=SGPU_TYPE,
            resources=FamilyResources(
                count=config.sgpu,
                memory=config.vmemory,
                cores=config.vcore,
                memory_factor=GIB_IN_MIB,
            ),
            register_annotation=SGPU_REGISTER,
            handshake_annotation="",  # HAMi checks no handshake for this type
            to_allocate_annotation="hami.io/metax-sgpu-devices-to-allocate",
            allocated_annotation=ALLOCATED,
            use_uuid=USE_UUID,
            nouse_uuid=NOUSE_UUID,
            # The fit reads the pod's policy and class, the score its topology switch.
            reads=(QOS_POLICY, APP_CLASS, TOPOLOGY_AWARE),
            # The holders' classes, policies and shares of the card (qos.held).
            holder_reads=(QOS_POLICY, APP_CLASS, ALLOCATED),
        )

    @property
    def wire(self) -> FamilyWire:
        return self._wire

    def decode_node(
        self, annotations: Mapping[str, str], node: NodeFacts = NO_NODE
    ) -> tuple[DeviceInfo, ...] | None:
        value = annotations.get(SGPU_REGISTER)
        return None if value is None else registration.decode(value)

    def container_request(
        self, container: Mapping[str, Any], *, strict: bool = False
    ) -> FamilyRequest | None:
        return read(container, self._wire, strict=strict)

    def fit(
        self,
        cards: Sequence[Card],
        request: FamilyRequest,
        pod: FitPod,
        allocated: PodDevices,
    ) -> FamilyFit:
        annotations = pod.annotations
        online = qos.online(annotations)
        app_class = annotations.get(APP_CLASS, "")
        wanted = annotations.get(QOS_POLICY, "")
        in_pod = qos.in_pod(annotations, allocated)
        counts: dict[str, int] = {}
        candidates: list[Card] = []
        for card in reversed(cards):
            why = self._verdict(card, request, pod, online, app_class, wanted, in_pod)
            if why is None:
                candidates.append(card)
            else:
                counts[why] = counts.get(why, 0) + 1
        if len(candidates) < request.nums:
            if candidates:
                counts[r.ALLOCATED_CARDS_INSUFFICIENT] = len(candidates)
            return FamilyFit(None, r.card_reasons(counts, len(cards)))
        best = candidates[: request.nums]
        if len(candidates) > request.nums:
            if APP_CLASS in annotations:
                if online:
                    # Stable, as Go's sort.Slice is on up to 12 candidates (insertion sort).
                    ranked = sorted(
                        candidates,
                        key=lambda c: qos.online_rank(pod.holders.get(c.info.id, ())),
                    )
                    best = ranked[: request.nums]
            elif request.coresreq == 100:
                zones = {i: zone_of(c.info) for i, c in enumerate(candidates)}
                best = topology.prioritize_whole(candidates, request.nums, zones)
        cores = 0 if online else request.coresreq
        return FamilyFit(
            tuple(
                ContainerDevice(c.info.id, _memory(c.info, request), cores, self._wire.type)
                for c in best
            )
        )

    def _verdict(
        self,
        card: Card,
        request: FamilyRequest,
        pod: FitPod,
        online: bool,
        app_class: str,
        wanted: str,
        in_pod: Mapping[str, str],
    ) -> str | None:
        """Why `card` cannot take one device of the request, in HAMi's order."""
        info, usage = card.info, card.usage
        if request.type != self._wire.type:
            return r.CARD_TYPE_MISMATCH
        if not card.healthy:
            return CARD_UNHEALTHY
        holders = pod.holders.get(info.id, ())
        if not qos.class_allows(app_class, usage.used, holders):
            return CARD_APP_CLASS_MISMATCH
        if not online:
            registered = qos_of(info)
            held = qos.held(info.id, registered, holders, self._wire.allocated_annotation)
            current = held if held is not None else in_pod.get(info.id, registered)
            if not qos.policy_allows(wanted, usage.used, request.coresreq == 100, current):
                return CARD_QOS_MISMATCH
        if not uuid_allowed(pod.annotations, info.id, self._wire):
            return r.CARD_UUID_MISMATCH
        if info.count <= usage.used:
            return r.CARD_TIME_SLICING_EXHAUSTED
        filtered = filtered_out(pod.filters, usage.used)
        if filtered is not None:
            return filtered
        # An online pod outranks what runs there: no compute checks (and it takes no cores).
        cores = 0 if online else request.coresreq
        after = usage + Usage(1, _memory(info, request), cores)
        full = _over(info, after, counted_cores=not online)
        if full is not None:
            return full.reason
        if online:
            return None
        if info.devcore == 100 and request.coresreq == 100 and usage.used > 0:
            return r.EXCLUSIVE_CONFLICT
        if info.devcore != 0 and usage.usedcores == info.devcore and request.coresreq == 0:
            return r.CARD_COMPUTE_UNITS_EXHAUSTED
        return None

    def room(self, card: Card, share: ContainerDevices) -> str | None:
        # An online pod's devices take no cores (its fit counts none against the card).
        got = _over(card.info, card.usage, counted_cores=any(d.usedcores for d in share))
        return None if got is None else str(got)

    def score_node(self, cards: Sequence[Card], devices: PodDevices, policy: NodePolicy) -> float:
        return self.score_pod(cards, devices, FitPod(), NO_NODE, policy)

    def score_pod(
        self,
        cards: Sequence[Card],
        devices: PodDevices,
        pod: FitPod,
        node: NodeFacts,
        policy: NodePolicy,
    ) -> float:
        """HAMi's ScoreNode, weighted as HAMi's policy layer weighs a policy-neutral score.

        `cards` carry their usage before the pod (HAMi's snapshot)."""
        chosen = [d for container in devices for d in container]
        if chosen and qos.online(pod.annotations):
            ids = {d.uuid for d in chosen}
            raw = sum(
                qos.online_score(pod.holders.get(c.info.id, ())) for c in cards if c.info.id in ids
            )
        elif self._topology_on(chosen, pod.annotations):
            zones = {c.info.id: zone_of(c.info) for c in cards}
            raw = topology.whole_card_score(
                ((d.uuid, zones.get(d.uuid, 0)) for d in chosen if d.usedcores == 100),
                (((c.info.id, zone_of(c.info)), c.usage.used == 0) for c in cards),
            )
        else:
            return 0.0
        return f32(_WEIGHT[policy] * f32(raw))

    def _topology_on(
        self, chosen: Sequence[ContainerDevice], annotations: Mapping[str, str]
    ) -> bool:
        """Whether the whole cards the pod took are scored by their links: when it took one,
        the config's setting unless the pod's annotation says otherwise (as Go's ParseBool
        reads it; any other value leaves the setting)."""
        if not any(d.usedcores == 100 for d in chosen):
            return False
        value = annotations.get(TOPOLOGY_AWARE)
        if value in _GO_TRUE:
            return True
        if value in _GO_FALSE:
            return False
        return self._topology_aware

    def annotations(self, devices: PodDevices, bind: BindContext = NO_BIND) -> dict[str, str]:
        """HAMi's two allocation annotations, the device plugin's own JSON of it, and the
        bind's time in Unix nanoseconds."""
        if not any(devices):
            return {}
        text = encode_pod_devices(devices)
        return {
            self._wire.to_allocate_annotation: text,
            self._wire.allocated_annotation: text,
            SGPU_PLUGIN_ALLOCATED: registration.plugin_allocation(devices),
            SGPU_PREDICATE_TIME: str(bind.now_ns),
        }

    def claim(self, container: Mapping[str, Any], pod: Mapping[str, Any]) -> Claim:
        return qos.claim(self._wire.resources.count, container, pod)


def from_config(section: Mapping[str, Any]) -> MetaxSgpu:
    """The sGPU family from the `metax` section of HAMi's device-config.yaml."""
    return MetaxSgpu(MetaxConfig.from_section(section))
