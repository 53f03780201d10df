"""The seam: the facts and rules one accelerator family contributes to a decision.

A family is split the way HAMi's `device.Devices` interface is, so that its
answers can be compared with HAMi's one function at a time:

* `FamilyWire` holds the wire names (annotation keys, the node lock, resource names)
  a family shares with its vendor's device plugin. They are data, not behaviour, so
  the cache, the bind path and the webhook read them without knowing the family.
* `Family` is the behaviour: decode the registration, read a container's request,
  fit one container onto the family's cards, score a node, encode what the bind
  writes, and say whether the webhook claims a container.

Everything here is pure: a family gets the pod's annotations and the cards' state,
never a client or a clock.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from hami.engine.fit import NodeFit
from hami.engine.model import (
    Card,
    ContainerDevices,
    DeviceInfo,
    NodeInventory,
    NodeState,
    PodDevices,
    PodRequest,
    Unregistered,
)

# One container's ask of one family (HAMi's ContainerDeviceRequest): defined with the engine's
# other requests, since a PodRequest carries them, and named here too, where families read it.
from hami.engine.model import FamilyRequest as FamilyRequest
from hami.engine.policy import CardFilter, NodePolicy, PodOptions
from hami.engine.quota import NamespaceQuota
from hami.engine.summarycheck import Summaries


@dataclass(frozen=True, slots=True)
class FamilyResources:
    """The extended resources a family's pods ask for (HAMi's `ResourceNames`)."""

    count: str
    memory: str = ""
    cores: str = ""
    # Further names the family reads (a memory percentage, Ascend's per-chip names...).
    extra: tuple[str, ...] = ()
    memory_factor: int = 1

    def all(self) -> tuple[str, ...]:
        return tuple(n for n in (self.count, self.memory, self.cores, *self.extra) if n)


@dataclass(frozen=True, slots=True)
class FamilyWire:
    """The names a family shares with its device plugin: changing one breaks it."""

    type: str  # HAMi's request Type and allocation word, e.g. "DCU"
    vendor: str  # the metrics label HAMi uses for the family
    resources: FamilyResources
    register_annotation: str  # node: the device plugin's card list
    handshake_annotation: str  # node: the device plugin's liveness handshake
    to_allocate_annotation: str  # pod: what the plugin still has to hand out
    allocated_annotation: str  # pod: what the scheduler gave the pod
    lock_name: str = "hami.io/mutex.lock"  # node annotation held while binding
    # A lock of the family's own (not HAMi's): a bare RFC 3339 time, freed after this many
    # seconds (hami.service.nodelock.wire.family_lock).
    lock_expiry_seconds: int = 0
    use_type: str = ""  # pod annotation: only these card models
    nouse_type: str = ""  # pod annotation: never these card models
    use_uuid: str = ""
    nouse_uuid: str = ""
    # Further pod annotations the family's fit reads (FitPod.annotations carries only these
    # and the four above, so that a pod's options stay small and comparable).
    reads: tuple[str, ...] = ()
    # The annotations of the pods holding a card that the family's rules read (FitPod.holders):
    # empty for a family that never reads them, so that no pod holding its cards costs the
    # cache anything for them.
    holder_reads: tuple[str, ...] = ()
    # The node annotations the family's node score reads (NodeFacts.annotations there): only
    # these are kept of a Node, and a change of one re-reads it.
    node_reads: tuple[str, ...] = ()
    # Environment variables that would take a container past what the device plugin gave it
    # (hami.engine.familyescapes): `device_env`, what the vendor's container runtime reads to
    # mount devices into any container of the family's nodes; `share_env`, what the device
    # plugin sets to hold its container to its share, which the container's own value replaces.
    device_env: tuple[str, ...] = ()
    share_env: tuple[str, ...] = ()
    # The DRA drivers that publish the family's cards with HAMi's consumable capacities
    # (`memory`, `cores`) and the attributes `uuid` and `productName`: the DRA view types
    # their devices as the family's cards (hami.engine.dra.slices.dra_inventory).
    dra_drivers: tuple[str, ...] = ()
    # Whether those drivers publish `cores` as the card's compute units (Hygon's: 120 on a
    # K100_AI) rather than as a percent of it (HAMi-DRA's NVIDIA driver): a pinned claim then
    # asks the pod's percent in the card's units, and what a claim consumed is counted back
    # as a percent (hami.engine.dra.device.to_units, to_percent).
    dra_core_units: bool = False

    def pod_annotations(self) -> tuple[str, ...]:
        """Every pod annotation the family's fit may read."""
        keys = (self.use_type, self.nouse_type, self.use_uuid, self.nouse_uuid, *self.reads)
        return tuple(k for k in keys if k)


@dataclass(frozen=True, slots=True)
class FitPod:
    """What a family may read of the pod it fits: its annotations and GPU policy."""

    annotations: Mapping[str, str] = field(default_factory=dict)
    # The GPU policy's card filters (GpuPolicy.card_filters): a fit asks each card of
    # hami.engine.policy.filtered_out, where HAMi checks them.
    filters: frozenset[CardFilter] = frozenset()
    # The annotations of the pods already holding each card, by card id: one entry per pod
    # holding it, as HAMi's DeviceUsage.PodInfos (built from each pod's collapsed devices),
    # each with only the keys FamilyWire.holder_reads names; empty for a family naming none.
    holders: Mapping[str, tuple[Mapping[str, str], ...]] = field(default_factory=dict)

    @property
    def mutex(self) -> bool:
        """The policy has `mutex`, which some families' own rules read (Vastai's dies)."""
        return CardFilter.MUTEX in self.filters


@dataclass(frozen=True, slots=True)
class FamilyFit:
    """One container on one node: the devices picked, or HAMi's reason text."""

    devices: ContainerDevices | None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Claim:
    """What the webhook does for one container of a family (HAMi's MutateAdmission)."""

    claimed: bool
    # Pod fields to set when absent (Ascend's runtimeClassName); applied once per pod.
    pod_fields: tuple[tuple[str, str], ...] = ()
    error: str = ""  # non-empty: the pod is refused with this message
    # The container's limits to set, replacing any value there (a family that turns a
    # count of several devices into whole-device cores and memory). NVIDIA's default count is
    # written as the number it is configured as, as HAMi's webhook writes it.
    limits: tuple[tuple[str, str | int], ...] = ()
    # The container's requests to set, replacing any value there (Ascend's memory rounded
    # up to a template is written to both).
    requests: tuple[tuple[str, str], ...] = ()
    # Environment variables to add to the container when it has none of that name.
    env: tuple[tuple[str, str], ...] = ()
    # Pod annotations to set.
    annotations: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What a family may read of a node besides its annotations.

    Some device plugins register no card list: their cards are derived from the
    extended resources the node reports (HAMi reads `status.capacity`), named after
    the node, and one reads the node's instance-type label."""

    name: str = ""
    capacity: Mapping[str, str] | None = None  # None: not known to the caller
    labels: Mapping[str, str] = field(default_factory=dict)
    # The node's annotations, for a family whose node score reads what its plugin wrote there
    # (given to a node score: those some family's FamilyWire.node_reads names).
    annotations: Mapping[str, str] = field(default_factory=dict)


NO_NODE = NodeFacts()


@dataclass(frozen=True, slots=True)
class BindContext:
    """What a bind knows beyond the devices: some families write it into the pod too.

    `now_ns` is the bind's clock (the engine reads none); `containers` are the pod's
    container specs, init containers first, in the order of the allocation; `cards` are
    the family's cards on the node."""

    node: str = ""
    now_ns: int = 0
    containers: tuple[Mapping[str, Any], ...] = ()
    cards: tuple[DeviceInfo, ...] = ()


NO_BIND = BindContext()


class Family(Protocol):
    """The behaviour one accelerator family contributes (see the module docstring)."""

    @property
    def wire(self) -> FamilyWire: ...

    def decode_node(
        self, annotations: Mapping[str, str], node: NodeFacts = NO_NODE
    ) -> tuple[DeviceInfo, ...] | None:
        """The cards registered on a node, None when the family is not registered there.

        Raises hami.engine.codec.CodecError for a registration it cannot read."""
        ...

    def container_request(
        self, container: Mapping[str, Any], *, strict: bool = False
    ) -> FamilyRequest | None:
        """The container's ask of this family, None when it asks for none.

        Lenient like HAMi (a malformed value reads as no ask) unless `strict`, where it
        raises hami.engine.requests.RequestError naming the value."""
        ...

    def fit(
        self,
        cards: Sequence[Card],
        request: FamilyRequest,
        pod: FitPod,
        allocated: PodDevices,
    ) -> FamilyFit:
        """Pick devices for one container from this family's cards on one node.

        `cards` are in HAMi's sorted order (the preferred card last, as HAMi walks from
        the tail); `allocated` holds what the pod's earlier containers took of this
        family on this node."""
        ...

    def room(self, card: Card, share: ContainerDevices) -> str | None:
        """Why `card`, whose usage counts `share` (what one pod holds of it) beside the rest,
        holds more than this family's fit lets a card hold; None while it holds no more.

        /bind asks it of the cards /filter chose (hami.engine.recheck), so it is the rule the
        family's fit places by: both ask hami.engine.checks.beyond of the card as the family
        counts it, the fit with the device it would give counted."""
        ...

    def score_node(self, cards: Sequence[Card], devices: PodDevices, policy: NodePolicy) -> float:
        """The family's addition to the node score for the devices chosen (HAMi's ScoreNode)."""
        ...

    def annotations(self, devices: PodDevices, bind: BindContext = NO_BIND) -> dict[str, str]:
        """The pod annotations a bind writes for the family's device plugin."""
        ...

    def claim(self, container: Mapping[str, Any], pod: Mapping[str, Any]) -> Claim:
        """Whether the webhook claims this container for the scheduler, and what it sets."""
        ...


@runtime_checkable
class PodScored(Protocol):
    """Optional: a family whose node score reads the pod or the node (HAMi's ScoreNode gets
    both; most families read neither and implement only Family.score_node)."""

    def score_pod(
        self,
        cards: Sequence[Card],
        devices: PodDevices,
        pod: FitPod,
        node: NodeFacts,
        policy: NodePolicy,
    ) -> float: ...


@runtime_checkable
class FastPath(Protocol):
    """Optional: a family that fits a pod's asks of it on a whole node at once, fast enough for
    /filter over thousands of nodes (NVIDIA's; hami.engine.decide asks each member for it).

    Offering it says two things. The family fits every container of the pod itself
    (`fit_pod`: with what the per-container Family.fit does not carry, the node's cordoned
    cards, its link scores and a namespace quota, remembered per node state under `key`,
    hash((request, options, quota)), computed once per decision). And its node score does not
    depend on the cards chosen (NodeState.binpack_rank and spread_rank hold it), so a pod
    asking only such families can try the nodes in policy order and stop at the first fit;
    `summaries` may then turn a node down from a summary of its cards, without walking them,
    with the reason the walk would give (None where it cannot tell)."""

    def fit_pod(
        self,
        node: NodeState,
        request: PodRequest,
        options: PodOptions,
        key: int,
        quota: NamespaceQuota | None,
    ) -> NodeFit: ...

    def summaries(
        self, request: PodRequest, options: PodOptions, quota: NamespaceQuota | None
    ) -> Summaries | None: ...


@runtime_checkable
class OwnInventory(Protocol):
    """Optional: the family whose cards are the node's own (NodeInventory.devices, the node
    state's cards that its FastPath fits) and whose registration says more than its cards:
    whether the node is schedulable at all (what the kubelet advertises of `gpu_resource`,
    GPU Feature Discovery labels where `gfd_split` > 0), its cordoned cards and link scores
    (NVIDIA's). hami.engine.inventory asks it of each member offering it, in the members'
    order; the other members' registrations are their decode_node's cards."""

    def inventory_key(
        self, node: Mapping[str, Any], gpu_resource: str, gfd_split: int
    ) -> tuple[Any, ...]:
        """Everything of the Node that `inventory` reads but its name."""
        ...

    def inventory(
        self, node: Mapping[str, Any], gpu_resource: str, gfd_split: int
    ) -> NodeInventory | Unregistered: ...


def node_score(
    family: Family,
    cards: Sequence[Card],
    devices: PodDevices,
    pod: FitPod,
    node: NodeFacts,
    policy: NodePolicy,
) -> float:
    """The family's addition to the node score, with the pod and node where it reads them.

    `cards` carry their usage before the pod (HAMi's snapshot); the value is added to the
    node score as it is (a family applies its own weight). HAMi calls this, once the pod
    fits, for each family whose card type is among the node's cards, even one the pod asks
    nothing of (devices then hold only empty containers)."""
    if isinstance(family, PodScored):
        return family.score_pod(cards, devices, pod, node, policy)
    return family.score_node(cards, devices, policy)


def untaken_score(
    by_type: Mapping[str, Family],
    cards: Mapping[str, Sequence[Card]],
    pod: FitPod,
    facts: NodeFacts,
    policy: NodePolicy,
    taken: Mapping[str, object],
) -> float:
    """The ScoreNode of each family of `by_type` on the node (`cards`, by type) that the pod
    takes nothing of (HAMi's OverrideScore scores every device type of the node). It reads
    the pod only through the devices taken (none), so it is the node's alone, which
    hami.engine.state computes once per node state."""
    return sum(
        node_score(by_type[kind], on, (), pod, facts, policy)
        for kind, on in cards.items()
        if kind not in taken and kind in by_type
    )
