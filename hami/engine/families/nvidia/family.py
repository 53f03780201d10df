"""NVIDIA's cards behind the Family seam, each method one of NVIDIA's own code paths.

decode_node is the codec's registration decode (OwnInventory's inventory reads the node's
whole registration: hami.engine.families.nvidia.registration), container_request
requests.py's reader, fit HAMi's walk for one container (hami.engine.walk: hami-core shares, MIG instances and
MPS-mode cards), annotations what a bind writes for HAMi's NVIDIA device plugin, claim the
webhook's rule (hami.engine.families.nvidia.claim). HAMi's NVIDIA ScoreNode adds nothing.

Decisions come through its FastPath (hami.engine.families.base): fit_pod is hami.engine.fit's
(the verdict pass, memoised per node state), summaries hami.engine.capacity's, which give the
same answer as the per-container walk of `fit` and are what make a /filter cheap
(docs/device-families.md); `fit` is that walk, which the parity tests compare them with.
"""

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from hami.engine import nvidianames as nv
from hami.engine import reasons as r
from hami.engine.checks import no_room
from hami.engine.codec import decode_node_devices, encode_pod_devices
from hami.engine.families.base import (
    NO_BIND,
    NO_NODE,
    BindContext,
    Claim,
    FamilyFit,
    FamilyRequest,
    FamilyWire,
    FitPod,
    NodeFacts,
)
from hami.engine.families.nvidia.claim import nvidia_claim
from hami.engine.families.nvidia.registration import registration, registration_key
from hami.engine.families.nvidia.wire import wire
from hami.engine.fit import NodeFit, fit_pod
from hami.engine.mig import mig_request
from hami.engine.migalloc import allocations, encode_allocations
from hami.engine.model import (
    Card,
    ContainerDevices,
    ContainerRequest,
    DeviceInfo,
    NodeInventory,
    NodeState,
    PodDevices,
    PodRequest,
    Unregistered,
)
from hami.engine.policy import NodePolicy, PodOptions, parse_gpu_policy, pod_options
from hami.engine.quota import NamespaceQuota
from hami.engine.requests import ResourceDefaults, container_request
from hami.engine.score import card_scores
from hami.engine.summarycheck import Summaries, summary_check
from hami.engine.walk import walk

MUTEX = parse_gpu_policy("mutex")


def _as_is(card: Card, score: float) -> tuple[float, ...]:
    """The walk's sort key for cards already in HAMi's order: a constant keeps them there."""
    return ()


class NvidiaFamily:
    def __init__(
        self, defaults: ResourceDefaults = ResourceDefaults(), gpu_core_policy: str = "default"
    ) -> None:
        self.defaults = defaults
        self.gpu_core_policy = gpu_core_policy
        self._wire = wire(defaults)

    @property
    def wire(self) -> FamilyWire:
        return self._wire

    def decode_node(
        self, annotations: Mapping[str, str], node: NodeFacts = NO_NODE
    ) -> tuple[DeviceInfo, ...] | None:
        raw = annotations.get(nv.NODE_REGISTER)
        return None if raw is None else decode_node_devices(raw)

    def inventory_key(
        self, node: Mapping[str, Any], gpu_resource: str, gfd_split: int
    ) -> tuple[Any, ...]:
        return registration_key(node, gpu_resource, gfd_split)

    def inventory(
        self, node: Mapping[str, Any], gpu_resource: str, gfd_split: int
    ) -> NodeInventory | Unregistered:
        return registration(node, gpu_resource, gfd_split)

    def container_request(
        self, container: Mapping[str, Any], *, strict: bool = False
    ) -> FamilyRequest | None:
        got = container_request(container, self.defaults, strict=strict)
        if got is None:
            return None
        return FamilyRequest(nv.NVIDIA, got.nums, got.memreq, got.mem_percentage, got.coresreq)

    def fit(
        self,
        cards: Sequence[Card],
        request: FamilyRequest,
        pod: FitPod,
        allocated: PodDevices,
    ) -> FamilyFit:
        """`cards` carry what the pod's earlier containers took (their MIG instances
        included), so `allocated` adds nothing; cordoned cards and link scores are the
        node's, which the seam does not carry (decide passes them on its own path)."""
        opts = pod_options(pod.annotations)
        if pod.mutex:
            opts = replace(opts, gpu_policy=MUTEX)
        # The seam's card filters, not the annotation's: what the other families' fits apply.
        opts = replace(opts, gpu_policy=replace(opts.gpu_policy, card_filters=pod.filters))
        req = ContainerRequest(
            request.nums, request.memreq, request.mem_percentage, request.coresreq
        )
        if req.nums > len(cards) and not mig_request(cards, opts):
            return FamilyFit(None, r.NODE_INSUFFICIENT_DEVICE)
        cores = min(req.coresreq, 100)
        scores = card_scores(cards, opts.weights)
        start = range(len(cards))
        got = walk(cards, scores, req, cores, opts, frozenset(), _as_is, None, None, start)
        return FamilyFit(got.devices, got.reason)

    def fit_pod(
        self,
        node: NodeState,
        request: PodRequest,
        options: PodOptions,
        key: int,
        quota: NamespaceQuota | None,
    ) -> NodeFit:
        return fit_pod(node, request, options, key, quota)

    def summaries(
        self, request: PodRequest, options: PodOptions, quota: NamespaceQuota | None
    ) -> Summaries | None:
        """None with a namespace quota: HAMi checks it before each card's room, so every node
        is fitted card by card."""
        return None if quota is not None else summary_check(request, options)

    def room(self, card: Card, share: ContainerDevices) -> str | None:
        """hami.engine.checks.no_room: the MIG placements, else the room rule of room_verdict."""
        return no_room(card, tuple(d.mig for d in share if d.mig is not None))

    def score_node(self, cards: Sequence[Card], devices: PodDevices, policy: NodePolicy) -> float:
        return 0.0

    def annotations(self, devices: PodDevices, bind: BindContext = NO_BIND) -> dict[str, str]:
        encoded = encode_pod_devices(devices)
        out = {nv.DEVICES_TO_ALLOCATE: encoded, nv.DEVICES_ALLOCATED: encoded}
        # Cards in MIG mode: which profile and placement each instance takes, for HAMi's
        # device plugin to create (written only when there is one, as HAMi writes it).
        mig = encode_allocations(allocations(devices))
        if mig:
            out[nv.MIG_ALLOCATIONS] = mig
        return out

    def claim(self, container: Mapping[str, Any], pod: Mapping[str, Any]) -> Claim:
        return nvidia_claim(container, self.defaults, self.gpu_core_policy)


FAMILY = NvidiaFamily()
