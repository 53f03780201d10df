"""Immutable values the engine works on: cards, nodes, requests and allocations."""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from hami.engine.nvidianames import NVIDIA

# HAMi's "percentage not set" sentinel for nvidia.com/gpumem-percentage.
PERCENTAGE_UNSET = 101


@dataclass(frozen=True, slots=True)
class MigPlacement:
    """Where a MIG instance sits on its card: memory slices start..start+size-1 (NVML's)."""

    start: int
    size: int

    def overlaps(self, other: "MigPlacement") -> bool:
        return self.start < other.start + other.size and other.start < self.start + self.size


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A MIG profile a card in `mig` mode offers, as its device plugin registers it."""

    name: str  # e.g. "3g.20gb"
    memory: int  # MiB (memoryMB)
    core: int  # percent of the card's SMs, rounded up by the device plugin
    slices: int  # sliceCount
    placements: tuple[MigPlacement, ...]


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG instance a container holds: the profile and placement the scheduler chose,
    and, once HAMi's device plugin has created it, its runtime identity."""

    profile: str
    placement: MigPlacement
    uuid: str = ""  # migUUID
    gpu_instance: int | None = None
    compute_instance: int | None = None

    @property
    def ready(self) -> bool:
        """Whether the device plugin has recorded the instance it created (HAMi's RuntimeReady)."""
        return (
            bool(self.uuid) and self.gpu_instance is not None and self.compute_instance is not None
        )


MIG_MODE = "mig"


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One card as HAMi's device plugin registers it on the node."""

    id: str
    index: int
    count: int  # split count: how many tasks may share the card
    devmem: int  # MiB
    devcore: int  # percent of SMs, normally 100
    type: str  # model, e.g. "NVIDIA-Tesla T4"
    numa: int = 0
    mode: str = "hami-core"
    health: bool = True
    mig_profiles: tuple[MigProfile, ...] = ()
    # The string entries of the registration's `custominfo` (a family's own card facts,
    # e.g. which physical card a die sits on), sorted by key.
    custom: tuple[tuple[str, str], ...] = ()

    def custom_value(self, key: str) -> str | None:
        return dict(self.custom).get(key)

    @property
    def mig(self) -> bool:
        """In MIG mode, a card is handed out by profile and placement, never as a plain share."""
        return self.mode == MIG_MODE

    @property
    def share_base(self) -> int:
        """The MiB a percentage of this card is taken of. In MIG mode the largest profile: the
        registered memory is more than any instance can hold (40,960 against 40,192 MiB on an
        A100-40GB), so the whole card is the largest profile (see DELIBERATE_DIFFERENCES)."""
        if self.mig and self.mig_profiles:
            return max(p.memory for p in self.mig_profiles)
        return self.devmem


def is_nvidia(device: DeviceInfo) -> bool:
    """HAMi's vendor match: the word in the device type, in any case."""
    return NVIDIA.lower() in device.type.lower()


@dataclass(frozen=True, slots=True)
class Usage:
    """What allocations already take from one card.

    On a MIG card also the instances placed on it, and how many pods use the card without a
    MIG allocation for it (HAMi then stops trusting the card: hami.engine.mig.untrusted).
    """

    used: int = 0  # tasks (slots)
    usedmem: int = 0  # MiB
    usedcores: int = 0  # percent
    mig: tuple[MigInstance, ...] = ()
    bare: int = 0  # pods holding the card without a MIG allocation for it

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(
            self.used + other.used,
            self.usedmem + other.usedmem,
            self.usedcores + other.usedcores,
            self.mig + other.mig if other.mig else self.mig,
            self.bare + other.bare,
        )

    def __sub__(self, other: "Usage") -> "Usage":
        mig = self.mig
        if other.mig:
            left = list(mig)
            for instance in other.mig:
                if instance in left:
                    left.remove(instance)
            mig = tuple(left)
        return Usage(
            self.used - other.used,
            self.usedmem - other.usedmem,
            self.usedcores - other.usedcores,
            mig,
            self.bare - other.bare,
        )

    @property
    def empty(self) -> bool:
        return (
            self.used == 0
            and self.usedmem == 0
            and self.usedcores == 0
            and not self.mig
            and self.bare == 0
        )


@dataclass(frozen=True, slots=True)
class Card:
    """A card with its current usage and its score under default weights.

    The score depends only on usage (HAMi v2.10 never counts the request for
    NVIDIA), so it is computed once when usage changes, not per decision.
    """

    info: DeviceInfo
    usage: Usage
    score: float
    # HAMi marks a card unhealthy when its MIG allocations do not add up (hami.engine.mig).
    untrusted: bool = False

    @property
    def healthy(self) -> bool:
        return self.info.health and not self.untrusted


class CardScores(NamedTuple):
    """The score of every card of one node, computed before fitting one container.

    A named tuple, not a frozen dataclass: a pod that fits nowhere makes one per
    node, and a tuple is built in a third of the time.
    """

    node: str
    container: int  # index in the allocation (init containers first)
    cards: tuple[Card, ...]
    scores: tuple[float, ...]

    def items(self) -> Iterator[tuple[str, float]]:
        return zip((c.info.id for c in self.cards), self.scores, strict=True)


@dataclass(frozen=True, slots=True)
class NodeState:
    """A registered GPU node as the engine sees it."""

    name: str
    cards: tuple[Card, ...]  # the NVIDIA cards, in registration order
    score: float  # node score from existing usage, HAMi's NodeScore
    # What HAMi orders the node by for a pod taking none of the other families' devices, under
    # the binpack and the spread node policy: `score` plus each of the node's families'
    # ScoreNode with nothing taken (HAMi scores every device type on the node; a MetaX GPU's
    # link annotations count so). Computed once, when the state is built (build_node), so
    # that ordering the nodes costs NVIDIA's pods what sorting by `score` costs.
    binpack_rank: float
    spread_rank: float
    cordoned: frozenset[str] = frozenset()
    # Pairwise link scores for topology-aware placement, uuid -> uuid -> score.
    links: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # The other device families' cards, by FamilyWire.type, in registration order; their
    # usage is in `score` too, as HAMi's node score sums every device of the node.
    families: Mapping[str, tuple[Card, ...]] = field(default_factory=dict)
    # The pods holding each card of a family that reads them (FamilyWire.holder_reads), by
    # card id: (pod key, the annotations the family reads) each (hami.engine.holders).
    holders: Mapping[str, tuple[tuple[str, Mapping[str, str]], ...]] = field(default_factory=dict)
    # The node's annotations the families' node scores read (FamilyWire.node_reads).
    annotations: Mapping[str, str] = field(default_factory=dict)
    # What the engine derives from this exact state (fit results by request and options, the
    # cards summed up by hami.engine.capacity), so that pods of one shape cost a lookup per
    # unchanged node. Not an argument: dataclasses.replace makes a new state with an empty
    # memo, so a derived value can never outlive the state it was derived from.
    memo: dict[object, object] = field(default_factory=dict, init=False, compare=False, repr=False)

    def all_cards(self) -> tuple[Card, ...]:
        """Every card of the node: NVIDIA's, then each other family's (for views and checks
        that cover them all; decisions read `cards` and `families` apart)."""
        if not self.families:
            return self.cards
        return (*self.cards, *(c for cards in self.families.values() for c in cards))


@dataclass(frozen=True, slots=True)
class NodeInventory:
    name: str
    devices: tuple[DeviceInfo, ...]  # NVIDIA cards only, registration order
    cordoned: frozenset[str] = frozenset()
    links: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # True when HAMi's device plugin registered the node: its Allocate finds the pod through
    # the node lock and reports the bind phase. False for cards read from GFD labels.
    handshake: bool = True
    # The node's allocatable nvidia.com/gpu: what its kubelet admits (hami.engine.advertised).
    advertised: int = 0
    # The other device families registered on the node: (FamilyWire.type, its cards), in
    # registry order. A node with only these is registered too, with no NVIDIA card.
    families: tuple[tuple[str, tuple[DeviceInfo, ...]], ...] = ()
    # The node's annotations the families' node scores read (FamilyWire.node_reads).
    annotations: tuple[tuple[str, str], ...] = ()

    def all_devices(self) -> tuple[DeviceInfo, ...]:
        """Every card of the node, NVIDIA's first."""
        return self.devices + tuple(d for _, cards in self.families for d in cards)


@dataclass(frozen=True, slots=True)
class Unregistered:
    name: str
    why: str


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    """One container's ask, HAMi's ContainerDeviceRequest for NVIDIA."""

    nums: int
    memreq: int = 0  # MiB per card; 0 means "use the percentage"
    mem_percentage: int = PERCENTAGE_UNSET
    coresreq: int = 0

    def memory_on(self, totalmem: int) -> int:
        """Memory this request takes on a card of `totalmem` MiB (explicit MiB beat the percentage)."""
        if self.memreq > 0:
            return self.memreq
        if self.mem_percentage != PERCENTAGE_UNSET:
            return totalmem * self.mem_percentage // 100
        return 0


@dataclass(frozen=True, slots=True)
class FamilyRequest:
    """One container's ask of one device family other than NVIDIA: HAMi's ContainerDeviceRequest
    (hami.engine.families; here so that a PodRequest can carry it)."""

    type: str  # FamilyWire.type of the family asked
    nums: int
    memreq: int = 0  # MiB per device; 0 with a percentage means "that share of it"
    mem_percentage: int = PERCENTAGE_UNSET
    coresreq: int = 0
    # What only one family reads (an Ascend template, a MetaX QoS policy...), as sorted
    # pairs so the request stays hashable and comparable.
    extra: tuple[tuple[str, str], ...] = ()

    def get(self, key: str, default: str = "") -> str:
        return dict(self.extra).get(key, default)


@dataclass(frozen=True, slots=True)
class PodRequest:
    """Per-container requests, init containers first; None where a container asks for no GPU."""

    init: tuple[ContainerRequest | None, ...] = ()
    app: tuple[ContainerRequest | None, ...] = ()
    # What each container (init first) asks of the other device families, in registry order;
    # () when no container asks any: an NVIDIA pod's request is what it always was.
    families: tuple[tuple[FamilyRequest, ...], ...] = ()

    @property
    def wants_nvidia(self) -> bool:
        return any(r is not None for r in self.init) or any(r is not None for r in self.app)

    @property
    def wants_gpu(self) -> bool:
        """Whether the pod asks for any device this scheduler places, of any family."""
        return self.wants_nvidia or bool(self.families)


@dataclass(frozen=True, slots=True)
class ContainerDevice:
    """One card given to one container: an entry of the allocation annotation."""

    uuid: str
    usedmem: int
    usedcores: int
    type: str = NVIDIA
    mig: MigInstance | None = None  # on a card in MIG mode: the instance it holds
    # What a family's fit chose beyond the card (Enflame's DRS profile, Ascend's split mode)
    # for the annotations its bind writes. Not on the wire, so never compared: an allocation
    # read back from a pod's annotations is the same allocation.
    extra: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    # The device family (FamilyWire.type) whose fit chose it, or whose allocation annotation
    # it was read from; "" for NVIDIA's. A family's entries may carry the card's model as
    # their `type` (AMD's do), so the family is kept apart from it. Not on the wire.
    family: str = field(default="", compare=False)

    def get(self, key: str, default: str = "") -> str:
        return dict(self.extra).get(key, default)


# One entry per container, init containers first, in spec order.
ContainerDevices = tuple[ContainerDevice, ...]
PodDevices = tuple[ContainerDevices, ...]
