"""The device-family plumbing in the engine, with Hygon's DCU as the pilot family: requests,
registration, fitting after NVIDIA in HAMi's order and words, the node score, annotations."""

from dataclasses import replace
from typing import Any

import pytest

from hami.engine import reasons as r
from hami.engine.asks import pod_request
from hami.engine.codec import decode_pod_devices, encode_node_devices
from hami.engine.decide import schedule
from hami.engine.families.hygon import HYGON
from hami.engine.families.registry import Families
from hami.engine.inventory import node_inventory, pod_allocation
from hami.engine.model import (
    ContainerDevice,
    FamilyRequest,
    NodeInventory,
    NodeState,
    PodRequest,
    Unregistered,
    Usage,
)
from hami.engine.policy import Defaults, pod_options
from hami.engine.preempt import Preemptor, Victim, victims_on
from hami.engine.requests import ResourceDefaults
from hami.engine.state import build_node, held
from hami.service.annotations import allocation_annotations
from tests.builders import FAMILIES, family_limits, family_node, sample_card, t4s

DCU = HYGON.wire
Obj = dict[str, Any]


def spec(*limits: dict[str, str]) -> Obj:
    return {
        "containers": [
            {"name": f"c{i}", "resources": {"limits": lim}} for i, lim in enumerate(limits)
        ]
    }


def test_hygon_is_registered() -> None:
    assert HYGON in FAMILIES.members
    assert FAMILIES.by_type()["DCU"] == HYGON
    assert set(DCU.resources.all()) <= set(FAMILIES.other_resource_names())


def test_a_bare_dcu_count_takes_the_whole_card_and_its_cores() -> None:
    """HAMi's Hygon request: no memory is 100 %, no cores is 100 (its default)."""
    request = pod_request(spec({"hygon.com/dcunum": "2"}), ResourceDefaults(), families=FAMILIES)
    assert request.families == ((FamilyRequest("DCU", 2, 0, 100, 100),),)
    assert request.wants_gpu and not request.wants_nvidia
    asked = pod_request(
        spec({"hygon.com/dcunum": "1", "hygon.com/dcumem": "2000", "hygon.com/dcucores": "30"}),
        ResourceDefaults(),
        families=FAMILIES,
    )
    assert asked.families == ((FamilyRequest("DCU", 1, 2000, 101, 30),),)


def test_an_nvidia_pod_carries_no_family_ask() -> None:
    request = pod_request(spec({"nvidia.com/gpu": "1"}), ResourceDefaults(), families=FAMILIES)
    assert request.families == () and request.wants_nvidia


def node_of(name: str, *objects: Obj) -> NodeState:
    inv = node_inventory(objects[0], families=FAMILIES)
    assert isinstance(inv, NodeInventory), inv
    return build_node(name, inv.devices, {}, families=inv.families, registry=FAMILIES)


def dcus(n: int) -> list[Any]:
    return [sample_card(HYGON, i) for i in range(n)]


def test_a_node_with_only_dcus_is_registered() -> None:
    inv = node_inventory(family_node("n", HYGON, dcus(2)), families=FAMILIES)
    assert isinstance(inv, NodeInventory)
    assert inv.devices == () and [k for k, _ in inv.families] == ["DCU"]
    assert [d.id for d in inv.all_devices()] == ["DCU-0", "DCU-1"]


@pytest.mark.parametrize("uuid", ["0000:1a:00.0", "DCU,0", "DCU;0"])
def test_a_card_id_that_cannot_travel_in_an_allocation_leaves_the_family_unregistered(
    uuid: str,
) -> None:
    """`id,type,MiB,cores:` per device, `;` per container: a PCI-style id would be read back
    as another device and its usage counted on none, so the node says why instead."""
    inv = node_inventory(family_node("n", HYGON, [replace(dcus(1)[0], id=uuid)]), families=FAMILIES)
    assert isinstance(inv, Unregistered)
    assert f"hami.io/node-dcu-register: device id {uuid!r} holds one of" in inv.why


def test_a_dcu_registration_listing_no_card_is_not_registered() -> None:
    """HAMi's GetNodeDevices: "no gpu found on node"; the reason names the annotation."""
    inv = node_inventory(family_node("n", HYGON, []), families=FAMILIES)
    assert isinstance(inv, Unregistered)
    assert "hami.io/node-dcu-register: no DCU device found on node" in inv.why


def test_a_mixed_node_keeps_both_families_and_scores_all_cards() -> None:
    node = family_node("n", HYGON, dcus(1))
    nv = t4s(1)
    node["metadata"]["annotations"]["hami.io/node-nvidia-register"] = encode_node_devices(nv)
    node["status"]["allocatable"]["nvidia.com/gpu"] = "10"
    inv = node_inventory(node, families=FAMILIES)
    assert isinstance(inv, NodeInventory)
    assert [d.id for d in inv.devices] == ["GPU-0"]
    # HAMi's node score sums every device: a used DCU makes the node busier.
    usage = {"DCU-0": Usage(1, 32768, 100)}
    state = build_node("n", inv.devices, usage, families=inv.families, registry=FAMILIES)
    assert (
        state.score
        > build_node("n", inv.devices, {}, families=inv.families, registry=FAMILIES).score
    )
    assert (
        build_node("n", inv.devices, {}, registry=FAMILIES).score
        == build_node("n", inv.devices, {}, families=inv.families, registry=FAMILIES).score
    )


def decide(nodes: dict[str, NodeState], limits: list[dict[str, str]], **annotations: str) -> Any:
    request = pod_request(spec(*limits), ResourceDefaults(), families=FAMILIES)
    return schedule(nodes, request, pod_options(annotations, Defaults()), families=FAMILIES)


def test_a_dcu_pod_is_placed_on_the_tail_card_and_annotated_for_hygons_plugin() -> None:
    nodes = {"n": node_of("n", family_node("n", HYGON, dcus(2)))}
    d = decide(nodes, [family_limits(HYGON, 1, 1000)])
    assert d.node == "n"
    assert d.devices == ((ContainerDevice("DCU-1", 1000, 100, "DCU"),),)
    out = allocation_annotations("n", d.devices, 0, families=FAMILIES)
    assert (
        out[DCU.allocated_annotation] == out[DCU.to_allocate_annotation] == "DCU-1,DCU,1000,100:;"
    )
    assert "hami.io/vgpu-devices-allocated" not in out
    assert out["hami.io/vgpu-node"] == "n" and out["hami.io/bind-phase"] == "allocating"


@pytest.mark.parametrize(
    ("limits", "reason"),
    [
        (family_limits(HYGON, 3), r.NODE_INSUFFICIENT_DEVICE),
        (family_limits(HYGON, 1, 40000), "2/2 CardInsufficientMemory"),
    ],
)
def test_reasons_are_hamis_words(limits: dict[str, str], reason: str) -> None:
    nodes = {"n": node_of("n", family_node("n", HYGON, dcus(2)))}
    d = decide(nodes, [limits])
    assert d.node is None and d.failed == {"n": reason}


def test_a_card_taken_whole_by_cores_refuses_the_next_pod() -> None:
    """A bare count takes 100 cores: the card is exclusive (HAMi's ExclusiveDeviceAllocateConflict
    comes after the core check, which fails first here)."""
    node = family_node("n", HYGON, dcus(1))
    inv = node_inventory(node, families=FAMILIES)
    assert isinstance(inv, NodeInventory)
    state = build_node(
        "n", (), {"DCU-0": Usage(1, 1000, 100)}, families=inv.families, registry=FAMILIES
    )
    d = decide({"n": state}, [family_limits(HYGON, 1, 1000)])
    assert d.failed == {"n": "1/1 CardInsufficientCore"}


def test_type_selection_reads_hygons_annotation() -> None:
    nodes = {"n": node_of("n", family_node("n", HYGON, dcus(1)))}
    request = pod_request(spec(family_limits(HYGON, 1)), ResourceDefaults(), families=FAMILIES)
    opts = pod_options({}, Defaults())
    refused = replace(opts, family_annotations=((DCU.use_type, "K100"),))
    assert schedule(nodes, request, refused, families=FAMILIES).failed == {
        "n": "1/1 CardTypeMismatch"
    }
    taken = replace(opts, family_annotations=((DCU.use_type, "z100"),))
    assert schedule(nodes, request, taken, families=FAMILIES).node == "n"


@pytest.mark.parametrize(("policy", "chosen"), [("binpack", "busy"), ("spread", "idle")])
def test_node_policy_orders_by_hamis_node_score_with_the_family_cards(
    policy: str, chosen: str
) -> None:
    inv = node_inventory(family_node("x", HYGON, dcus(2)), families=FAMILIES)
    assert isinstance(inv, NodeInventory)
    nodes = {
        "busy": build_node(
            "busy", (), {"DCU-0": Usage(1, 1000, 10)}, families=inv.families, registry=FAMILIES
        ),
        "idle": build_node("idle", (), {}, families=inv.families, registry=FAMILIES),
    }
    limits = {**family_limits(HYGON, 1, 1000), "hygon.com/dcucores": "10"}
    d = decide(nodes, [limits], **{"hami.io/node-scheduler-policy": policy})
    assert d.node == chosen


def test_a_pod_asking_two_families_fits_both_or_neither() -> None:
    from hami.engine.codec import encode_node_devices

    node = family_node("n", HYGON, dcus(1))
    node["metadata"]["annotations"]["hami.io/node-nvidia-register"] = encode_node_devices(t4s(1))
    node["status"]["allocatable"]["nvidia.com/gpu"] = "10"
    nodes = {"n": node_of("n", node)}
    both = decide(
        nodes, [{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}, family_limits(HYGON, 1)]
    )
    assert both.devices == (
        (ContainerDevice("GPU-0", 1000, 0),),
        (ContainerDevice("DCU-0", 32768, 100, "DCU"),),
    )
    out = allocation_annotations("n", both.devices, 0, families=FAMILIES)
    assert decode_pod_devices(out["hami.io/vgpu-devices-allocated"]) == (
        (ContainerDevice("GPU-0", 1000, 0),),
        (),
    )
    assert decode_pod_devices(out[DCU.allocated_annotation]) == (
        (),
        (ContainerDevice("DCU-0", 32768, 100, "DCU"),),
    )
    # NVIDIA's ask cannot fit: the DCU is not taken either, and the reason is NVIDIA's.
    neither = decide(nodes, [{"nvidia.com/gpu": "2"}, family_limits(HYGON, 1)])
    assert neither.node is None and neither.failed == {"n": r.NODE_INSUFFICIENT_DEVICE}
    # The DCU cannot fit: no NVIDIA card is taken.
    state = nodes["n"]
    full = {"DCU-0": Usage(4, 0, 0)}
    dcu_infos = tuple(c.info for c in state.families["DCU"])
    nvidia_infos = tuple(c.info for c in state.cards)
    nodes["n"] = build_node(
        "n", nvidia_infos, full, families=[("DCU", dcu_infos)], registry=FAMILIES
    )
    refused = decide(nodes, [{"nvidia.com/gpu": "1"}, family_limits(HYGON, 1)])
    assert refused.node is None and refused.failed == {"n": "1/1 CardTimeSlicingExhausted"}


def test_app_containers_see_what_the_ones_before_took() -> None:
    nodes = {"n": node_of("n", family_node("n", HYGON, dcus(2)))}
    d = decide(nodes, [family_limits(HYGON, 1), family_limits(HYGON, 1)])
    assert [c[0].uuid for c in d.devices] == ["DCU-1", "DCU-0"]
    too_many = decide(nodes, [family_limits(HYGON, 1)] * 3)
    assert too_many.failed == {"n": "2/2 CardInsufficientMemory"}


def test_a_pods_dcu_allocation_counts_against_its_cards() -> None:
    devices = ((ContainerDevice("DCU-1", 1000, 30, "DCU"),),)
    pod = {
        "metadata": {
            "uid": "u",
            "namespace": "ns",
            "name": "p",
            "annotations": allocation_annotations("n", devices, 0, families=FAMILIES),
        },
        "spec": {"containers": [{"name": "c", "resources": {"limits": family_limits(HYGON, 1)}}]},
    }
    alloc = pod_allocation(pod, families=FAMILIES)
    assert alloc is not None
    assert alloc.devices == () and alloc.family_devices == devices
    assert held(alloc, frozenset()) == {"DCU-1": Usage(1, 1000, 30)}


def test_hami_form_of_the_allocation_goes_to_the_containers_naming_the_family() -> None:
    """HAMi's scheduler writes only the containers given cards."""
    pod = {
        "metadata": {
            "uid": "u",
            "name": "p",
            "annotations": {
                "hami.io/vgpu-node": "n",
                DCU.allocated_annotation: "DCU-1,DCU,0,100:;",
            },
        },
        "spec": {
            "containers": [
                {"name": "a"},
                {"name": "b", "resources": {"limits": family_limits(HYGON, 1)}},
            ]
        },
    }
    alloc = pod_allocation(pod, families=FAMILIES)
    assert alloc is not None
    assert alloc.family_devices == ((), (ContainerDevice("DCU-1", 0, 100, "DCU"),))


def test_pod_request_without_families_is_nvidias() -> None:
    request = pod_request(spec(family_limits(HYGON, 1)), ResourceDefaults(), families=Families())
    assert request == PodRequest(app=(None,))


def test_preemption_evicts_for_a_dcu_pod_only_what_frees_a_dcu() -> None:
    """Without the families' fit a DCU-only pod "fits" every node's NVIDIA cards, and a plan
    would evict NVIDIA pods for it."""
    node = family_node("n", HYGON, dcus(1))
    node["metadata"]["annotations"]["hami.io/node-nvidia-register"] = encode_node_devices(t4s(1))
    node["status"]["allocatable"]["nvidia.com/gpu"] = "10"
    inv = node_inventory(node, families=FAMILIES)
    assert isinstance(inv, NodeInventory)
    on_gpu = Victim("g", "ns", "g", 1, 0, {"GPU-0": Usage(1, 1000, 0)})
    on_dcu = Victim("d", "ns", "d", 1, 0, {"DCU-0": Usage(1, 32768, 100)})
    usage = {"GPU-0": Usage(1, 1000, 0), "DCU-0": Usage(1, 32768, 100)}
    state = build_node("n", inv.devices, usage, families=inv.families, registry=FAMILIES)
    request = pod_request(spec(family_limits(HYGON, 1)), ResourceDefaults(), families=FAMILIES)
    pod = Preemptor(request, pod_options({}, Defaults()), 100, families=FAMILIES)
    plan = victims_on(state, [on_gpu, on_dcu], pod)
    assert plan is not None and [v.name for v in plan.victims] == ["d"]
    assert plan.devices == ((ContainerDevice("DCU-0", 32768, 100, "DCU"),),)
    assert victims_on(state, [on_gpu], pod) is None


def test_only_cards_whose_model_names_the_type_are_offered() -> None:
    """HAMi filters the node's devices by the request type in the model, in any case."""
    odd = replace(sample_card(HYGON, 1), type="Z100L")
    nodes = {"n": node_of("n", family_node("n", HYGON, [sample_card(HYGON, 0), odd]))}
    assert decide(nodes, [family_limits(HYGON, 2)]).failed == {"n": r.NODE_INSUFFICIENT_DEVICE}
    assert decide(nodes, [family_limits(HYGON, 1)]).devices == (
        (ContainerDevice("DCU-0", 32768, 100, "DCU"),),
    )
