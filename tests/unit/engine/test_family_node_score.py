"""HAMi scores every device type on a node: its allocateAppContainers gives the pod an entry
for each type the node has, empty where the pod takes nothing, and OverrideScore adds each
type's ScoreNode. A MetaX GPU node's link annotations so count for pods taking none of its
GPUs, NVIDIA-only pods among them (2000 less the 0-card entry: binpack reads the losses,
spread the scores). The value is the node's alone, computed once per node state."""

import json
from typing import Any

import pytest

from hami.engine.asks import pod_request
from hami.engine.decide import schedule
from hami.engine.families.hygon import HYGON
from hami.engine.inventory import node_inventory
from hami.engine.model import NodeInventory, NodeState, Usage
from hami.engine.policy import Defaults, pod_options
from hami.engine.requests import ResourceDefaults
from hami.engine.state import build_node
from tests.builders import FAMILIES, family_limits, registered_node, sample_card, t4s

LOSSES = "metax-tech.com/gpu.topology.losses"
SCORES = "metax-tech.com/gpu.topology.scores"


def state(
    name: str,
    metax: int = 0,
    busy: bool = False,
    dcus: int = 0,
    notes: dict[str, str] | None = None,
) -> NodeState:
    """A node of two T4s, with `metax` MetaX GPUs (capacity) and `dcus` Hygon DCUs beside;
    `busy`: one T4 half used."""
    node: dict[str, Any] = registered_node(name, t4s(2, prefix=f"GPU-{name}"))
    node["metadata"]["annotations"].update(notes or {})
    node["status"]["capacity"] = {"metax-tech.com/gpu": str(metax)} if metax else {}
    if dcus:
        from hami.engine.codec import encode_node_devices

        cards = tuple(sample_card(HYGON, i) for i in range(dcus))
        node["metadata"]["annotations"][HYGON.wire.register_annotation] = encode_node_devices(cards)
        node["metadata"]["annotations"][HYGON.wire.handshake_annotation] = "Reported now"
        node["status"]["allocatable"][HYGON.wire.resources.count] = str(4 * dcus)
    inv = node_inventory(node, families=FAMILIES)
    assert isinstance(inv, NodeInventory), inv
    usage = {f"GPU-{name}-0": Usage(1, 7680, 0)} if busy else {}
    return build_node(
        name,
        inv.devices,
        usage,
        families=inv.families,
        annotations=dict(inv.annotations),
        registry=FAMILIES,
    )


def place(nodes: list[NodeState], limits: dict[str, str], policy: str) -> Any:
    spec = {"containers": [{"name": "c", "resources": {"limits": limits}}]}
    request = pod_request(spec, ResourceDefaults(), families=FAMILIES)
    options = pod_options({"hami.io/node-scheduler-policy": policy}, Defaults())
    return schedule({n.name: n for n in nodes}, request, options, families=FAMILIES)


GPU = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}
ZERO = {LOSSES: json.dumps({"0": 7, "1": 0}), SCORES: json.dumps({"0": 60, "1": 100})}


@pytest.mark.parametrize(
    ("policy", "metax_notes", "chosen", "added"),
    [
        # binpack: the idle MetaX node gains 2000 - 7 and beats the busier plain node.
        ("binpack", ZERO, "mx", 1993.0),
        # spread: it gains 2000 - 60, so the busier plain node is the idler one.
        ("spread", ZERO, "plain", 1940.0),
        # No 0-card entry: HAMi reads 0, the full 2000 is added.
        ("binpack", {LOSSES: json.dumps({"1": 3})}, "mx", 2000.0),
        # Only the other policy's annotation: nothing added, the usage decides.
        ("binpack", {SCORES: json.dumps({"0": 60})}, "plain", 0.0),
        ("spread", {LOSSES: json.dumps({"0": 7})}, "mx", 0.0),
        # No annotation: nothing added.
        ("binpack", {}, "plain", 0.0),
        ("spread", {}, "mx", 0.0),
    ],
)
def test_an_nvidia_pod_is_ranked_with_the_metax_gpus_link_score(
    policy: str, metax_notes: dict[str, str], chosen: str, added: float
) -> None:
    mx = state("mx", metax=4, notes=metax_notes)
    plain = state("plain", busy=True)
    decision = place([mx, plain], GPU, policy)
    assert decision.node == chosen
    rank = mx.binpack_rank if policy == "binpack" else mx.spread_rank
    assert rank == mx.score + added
    if chosen == "mx":
        assert decision.node_score == rank


def test_a_node_without_other_families_is_ranked_by_its_score() -> None:
    plain = state("plain", busy=True)
    assert plain.binpack_rank == plain.spread_rank == plain.score
    # MetaX GPUs without annotations, or another family's cards, add nothing either.
    for node in (state("mx", metax=2, busy=True), state("dcu", dcus=1, busy=True)):
        assert node.families and node.binpack_rank == node.spread_rank == node.score


@pytest.mark.parametrize(("policy", "chosen"), [("binpack", "mx"), ("spread", "dcu")])
def test_a_pod_asking_another_family_counts_the_metax_gpus_it_takes_none_of(
    policy: str, chosen: str
) -> None:
    """A DCU pod on two DCU nodes, one with MetaX GPUs: their score counts there too."""
    mx = state("mx", metax=4, dcus=1, notes=ZERO)
    dcu = state("dcu", dcus=1)
    decision = place([mx, dcu], family_limits(HYGON, 1, 1000), policy)
    assert decision.node == chosen
    if chosen == "mx":
        assert decision.node_score == mx.binpack_rank
