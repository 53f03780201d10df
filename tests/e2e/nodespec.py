"""Fake GPU node descriptions shared by the tests and the node simulator.

Tests build :class:`NodeSpec` values (usually through :func:`t4_node`) and hand them to the
``nodesim`` fixture, which serialises them with :func:`dump_specs` for ``python -m
tests.e2e.nodesim --spec``. The simulator turns each spec into a Node object whose
``hami.io/node-nvidia-register`` annotation is byte-for-byte what HAMi's device plugin writes,
or, for a ``plugin="gke"`` spec (:func:`gke_t4_node`), a node as GKE's own device plugin and
Lab 12's GPU Feature Discovery labels leave it: whole cards in allocatable, no HAMi annotation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from hami.engine.families.base import Family
from tests.builders import FAMILIES, sample_card
from tests.families_samples import SAMPLE_ALLOCATABLE, SAMPLE_LABELS, SAMPLE_NODE
from tests.reference.geometries import A100_40GB_MEMORY, A100_EXAMPLE
from tests.reference.hami_v210_mig import Profile

REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
GPU_RESOURCE = "nvidia.com/gpu"

T4_TYPE = "NVIDIA-Tesla T4"
T4_MEMORY_MIB = 15360
A100_TYPE = "NVIDIA A100-SXM4-40GB"  # NVML's name already starts with NVIDIA: no prefix added

PLUGINS = ("hami", "gke", "dra")


@dataclass(frozen=True)
class CardSpec:
    """One physical GPU as the device plugin reports it."""

    uuid: str
    index: int
    devmem: int
    devcore: int = 100
    type: str = T4_TYPE
    numa: int = 0
    mode: str = "hami-core"
    health: bool = True
    # In MIG mode, the profiles the device plugin registers, as it writes them (``migProfiles``).
    mig_profiles: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class NodeSpec:
    """A node with ``cards``, each shareable by ``split`` tasks (the plugin's deviceSplitCount).

    ``plugin`` is the device plugin the node runs: ``hami`` (registration annotation, one
    ``nvidia.com/gpu`` per share, the Allocate handshake) or ``gke`` (GKE's own: no annotation,
    no handshake, one per card, or ``split`` per card with GKE's GPU time-sharing) or ``dra``
    (none: a DRA driver publishes the cards, tests/e2e/dradriver.py; no ``nvidia.com/gpu``).
    """

    name: str
    cards: tuple[CardSpec, ...]
    split: int = 10
    labels: Mapping[str, str] = field(default_factory=dict)
    plugin: str = "hami"
    # Seconds the simulated device plugin takes for each pod's Allocate: a slow plugin keeps
    # the node lock longer, so binds to the node queue behind it.
    allocate_delay: float = 0.0
    # With plugin "hami": the device family whose vendor plugin the node runs (its
    # FamilyWire.type, hami/engine/families); "" for HAMi's NVIDIA plugin.
    family: str = ""
    # The count resource the family's plugin advertises, where a device config renames it.
    resource: str = ""
    # Node annotations the plugin writes beside its registration (Ascend's hami-vnpu-core).
    annotations: Mapping[str, str] = field(default_factory=dict)
    # With plugin "hami": the plugin is gone from the kubelet (its socket removed), which
    # leaves its resource in capacity at 0 allocatable, and its registration annotation behind.
    withdrawn: bool = False

    def __post_init__(self) -> None:
        if self.plugin not in PLUGINS:
            raise ValueError(f"plugin {self.plugin!r}: one of {', '.join(PLUGINS)}")

    @property
    def per_card(self) -> int:
        return self.split

    @property
    def gpu_capacity(self) -> int:
        """What the device plugin advertises as ``nvidia.com/gpu``: one per share, or per card."""
        return len(self.cards) * self.per_card


def gke_t4_node(
    name: str,
    uuids: Sequence[str],
    *,
    labels: Mapping[str, str] | None = None,
    shared_clients: int = 1,
) -> NodeSpec:
    """T4 cards as GKE's device plugin advertises them, labelled as in Lab 12, Step 2;
    ``shared_clients`` is the node pool's ``max-shared-clients-per-gpu`` (GPU time-sharing)."""
    node = t4_node(name, uuids)
    return NodeSpec(
        name=name,
        cards=node.cards,
        split=shared_clients,
        plugin="gke",
        labels={**gfd_labels(node.cards), **(labels or {})},
    )


def gfd_labels(cards: Sequence[CardSpec]) -> dict[str, str]:
    """Lab 12's `kubectl label node ... nvidia.com/gpu.memory=15360 ...` for these cards."""
    return {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
        "nvidia.com/gpu.memory": str(cards[0].devmem),
        "nvidia.com/gpu.product": cards[0].type.replace(" ", "-"),
        "nvidia.com/gpu.count": str(len(cards)),
        "nvidia.com/gpu.present": "true",
    }


def t4_node(
    name: str,
    uuids: Sequence[str] | None = None,
    *,
    split: int = 10,
    numa: Sequence[int] | None = None,
    labels: Mapping[str, str] | None = None,
) -> NodeSpec:
    """A node with Tesla T4 cards (15360 MiB, 100 cores), four unless ``uuids`` says otherwise.

    Default UUIDs embed the node name (``GPU-<name>-0`` ...), so cards of different nodes never
    collide and an allocation annotation shows at a glance which node it points at.
    """
    ids = list(uuids) if uuids is not None else [f"GPU-{name}-{i}" for i in range(4)]
    numas = list(numa) if numa is not None else [0] * len(ids)
    if len(numas) != len(ids):
        raise ValueError(f"{len(ids)} cards but {len(numas)} NUMA ids")
    cards = tuple(
        CardSpec(uuid=u, index=i, devmem=T4_MEMORY_MIB, numa=n)
        for i, (u, n) in enumerate(zip(ids, numas, strict=True))
    )
    return NodeSpec(name=name, cards=cards, split=split, labels=dict(labels or {}))


def a100_mig_node(name: str, profiles: Sequence[Profile] = A100_EXAMPLE) -> NodeSpec:
    """One NVIDIA A100-SXM4-40GB in dynamic MIG mode (the issue's example: 1g.5gb, 2g.10gb,
    3g.20gb and 7g.40gb allowed). Its count is the largest instance count, 7, as HAMi's plugin
    registers a MIG card."""
    registered = tuple(
        {
            "name": p.name,
            "memoryMB": p.memory,
            "core": p.core,
            "sliceCount": p.slices,
            "placements": [{"start": start, "size": size} for start, size in p.placements],
        }
        for p in profiles
    )
    card = CardSpec(
        uuid=f"GPU-{name}-0",
        index=0,
        devmem=A100_40GB_MEMORY,
        type=A100_TYPE,
        mode="mig",
        mig_profiles=registered,
    )
    return NodeSpec(name=name, cards=(card,), split=7)


@dataclass(frozen=True)
class PluginWire:
    """What a node's device plugin writes and reads: its registration annotation and
    handshake, the resource it advertises, the pod annotation its Allocate takes devices from,
    and the word its entries carry. For another family these are the names the family module
    declares (its FamilyWire: the names shared with that vendor's plugin)."""

    register: str
    handshake: str
    resource: str
    to_allocate: str
    vendor: str
    # Whether its Allocate follows HAMi's protocol: the pod named by HAMi's node lock, its
    # devices from the to-allocate annotation, bind-phase success and the lock released.
    # A family whose HAMi code takes no lock (or its own) has its pods admitted as they come.
    handshake_allocate: bool = True
    # A lock of the family's own (Cambricon's `cambricon.com/dsmlu.lock`): its plugin removes
    # it after Allocate, whoever took it.
    own_lock: str = ""


NVIDIA_PLUGIN = PluginWire(
    REGISTER_ANNOTATION, "", GPU_RESOURCE, "hami.io/vgpu-devices-to-allocate", "NVIDIA"
)
HAMI_LOCK = "hami.io/mutex.lock"


def plugin_wire(node: NodeSpec) -> PluginWire:
    if not node.family:
        return NVIDIA_PLUGIN
    wire = FAMILIES.by_type()[node.family].wire
    return PluginWire(
        wire.register_annotation,
        wire.handshake_annotation,
        node.resource or wire.resources.count,
        wire.to_allocate_annotation,
        wire.type,
        wire.lock_name == HAMI_LOCK and bool(wire.to_allocate_annotation),
        wire.lock_name if wire.lock_name != HAMI_LOCK else "",
    )


def node_annotations(node: NodeSpec, now: str) -> dict[str, str]:
    """What the node's device plugin writes on the Node: for a family, its sample
    (tests/families_samples.py) where there is one, else its registration of the node's
    cards and its handshake."""
    if node.family in SAMPLE_NODE:
        return {**SAMPLE_NODE[node.family], **node.annotations}
    wire = plugin_wire(node)
    handshake = {wire.handshake: f"Reported_{now}"} if wire.handshake else {}
    return {wire.register: register_annotation(node), **handshake, **node.annotations}


def node_resources(node: NodeSpec) -> dict[str, str]:
    """The extended resources the node's device plugin advertises (capacity and allocatable)."""
    if node.family in SAMPLE_ALLOCATABLE:
        return dict(SAMPLE_ALLOCATABLE[node.family])
    healthy = sum(1 for c in node.cards if c.health)
    return {plugin_wire(node).resource: str(healthy * node.per_card)}


def node_labels(node: NodeSpec) -> dict[str, str]:
    return {**SAMPLE_LABELS.get(node.family, {}), **node.labels}


def family_node(name: str, family: Family, cards: int = 2, split: int = 0) -> NodeSpec:
    """A node running `family`'s vendor plugin with `cards` of its sample card
    (tests/builders.SAMPLE_CARDS: stand-in values), each shared by `split` tasks (the sample's
    slots unless given)."""
    infos = [sample_card(family, i, uuid=f"{name}-{family.wire.type}-{i}") for i in range(cards)]
    specs = tuple(CardSpec(d.id, d.index, d.devmem, d.devcore, d.type) for d in infos)
    return NodeSpec(name=name, cards=specs, split=split or infos[0].count, family=family.wire.type)


def register_annotation(node: NodeSpec) -> str:
    """The device plugin's v2.8+ ``hami.io/node-nvidia-register`` value for ``node``.

    Field order follows HAMi's DeviceInfo struct and every field is ``omitempty``, so zero
    values (index 0, NUMA 0, health false, ...) are left out exactly as Go's encoder does.
    """
    devices = [
        {
            "id": card.uuid,
            "index": card.index,
            "count": node.split,
            "devmem": card.devmem,
            "devcore": card.devcore,
            "type": card.type,
            "numa": card.numa,
            "mode": card.mode,
            "migProfiles": list(card.mig_profiles),
            "health": card.health,
        }
        for card in node.cards
    ]
    return go_json([{k: v for k, v in d.items() if v} for d in devices])


def go_json(value: Any) -> str:
    """Encode like Go's encoding/json.Marshal: compact, UTF-8, HTML-safe escapes."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for raw, escaped in _GO_ESCAPES.items():
        text = text.replace(raw, escaped)
    return text


_GO_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def dump_specs(nodes: Sequence[NodeSpec]) -> str:
    return json.dumps({"nodes": [asdict(n) for n in nodes]}, indent=2, sort_keys=True)


def load_specs(text: str) -> list[NodeSpec]:
    nodes = []
    for raw in json.loads(text)["nodes"]:
        cards = tuple(
            CardSpec(**{**c, "mig_profiles": tuple(c.get("mig_profiles", ()))})
            for c in raw["cards"]
        )
        nodes.append(
            NodeSpec(
                name=raw["name"],
                cards=cards,
                split=raw.get("split", 10),
                labels=raw.get("labels", {}),
                plugin=raw.get("plugin", "hami"),
                allocate_delay=raw.get("allocate_delay", 0.0),
                family=raw.get("family", ""),
                annotations=raw.get("annotations", {}),
                withdrawn=raw.get("withdrawn", False),
            )
        )
    return nodes
