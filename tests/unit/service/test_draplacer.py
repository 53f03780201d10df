"""The DRA placer's steps against the in-memory API server: each state a placement can be left
in by a leader that stopped (hand-over, restart, a lost answer) is finished by the next one,
never made twice (docs/dra.md). Its policies on the real control plane: tests/e2e/test_dra_mode.py."""

import asyncio
from collections.abc import Callable
from typing import Any

from hami.cache.store import ClusterCache
from hami.engine.dra.translate import GATE
from hami.engine.model import ContainerDevice
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.runtime.reporting import FilterReporter
from hami.service.draplacer import DraPlacer, gated, stranded
from hami.service.explain import explain
from hami.service.placement import FilterOutcome, Placement
from tests.builders import FAMILIES, T4_MIB, gpu_pod, registered_node, t4s
from tests.draobjects import gpu_device, resource_slice
from tests.drapods import DRA, stored_pod
from tests.fakes.clock import Clock
from tests.fakes.events import RecordedEvents
from tests.fakes.kubeapi import FakeKube

# The webhook's schedulerName (AdmissionConfig's default), which the placer serves.
SCHEDULER = "hami-scheduler"


def node_slice(node: str, uuids: list[str]) -> dict[str, Any]:
    devices = [gpu_device(f"gpu-{u}", u, memory_mib=T4_MIB, index=int(u[-1])) for u in uuids]
    return resource_slice(node, devices)


def over_dra(cache: ClusterCache) -> Placement:
    """The placer's decisions, as hami.runtime.dramode wires them: over the cards DRA drivers
    publish, with the device plugin's policies and counts."""
    return Placement(cache, Defaults(), ResourceDefaults(), states=cache.dra_view)


def two_cards() -> ClusterCache:
    """Node n, its two T4s served by both the device plugin and a DRA driver."""
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])
    cache.dra.replace_slices([node_slice("n", ["GPU-0", "GPU-1"])])
    return cache


def placer(
    kube: FakeKube,
    cache: ClusterCache | None = None,
    report: Callable[[FilterOutcome], None] = lambda _: None,
) -> DraPlacer:
    cache = cache or two_cards()
    return DraPlacer(
        kube,
        over_dra(cache),
        DRA,
        lambda: True,
        cache.dra.nodes,
        scheduler_name=SCHEDULER,
        report=report,
    )


def place(kube: FakeKube, pod: dict[str, Any], cache: ClusterCache | None = None) -> bool:
    meta = pod["metadata"]
    return asyncio.run(placer(kube, cache).place("ns", meta["name"], meta["uid"]))


def pinned(kube: FakeKube, claim: str = "p-c") -> str:
    """The card UUIDs the claim's selectors name."""
    made = kube.get("resourceclaims", claim, "ns")
    assert made is not None
    return str([r["exactly"]["selectors"] for r in made["spec"]["devices"]["requests"]])


def test_a_gated_pod_gets_its_pinned_claim_then_loses_its_gate() -> None:
    kube = FakeKube()
    pod = kube.add("pods", stored_pod())
    assert gated(pod)
    assert place(kube, pod) is True
    claim = kube.get("resourceclaims", "p-c", "ns")
    assert claim is not None
    assert claim["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["capacity"] == {"requests": {"memory": "1000Mi", "cores": "0"}}
    after = kube.get("pods", "p", "ns")
    assert after is not None and not gated(after)
    writes = [c[0] for c in kube.landed if not c[0].startswith("get_")]
    assert writes == ["create_resource_claim", "ungate_pod"]


def test_a_pod_no_card_takes_stays_gated_and_the_user_is_told_why() -> None:
    """kube-scheduler says nothing of a gated pod: the placer's reporter posts its sentence and
    /filter's Event, in the extender's words (docs/dra.md)."""
    kube = FakeKube()
    kube.add(
        "pods", stored_pod(limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000})
    )  # more than a T4 has
    events = RecordedEvents()
    p = placer(kube, report=FilterReporter(events, gated=True))
    assert asyncio.run(p.place("ns", "p", "u-1")) is False
    assert events.seen == [
        ("Warning", "FailedScheduling", "0/1 nodes are available: 1 2/2 CardInsufficientMemory."),
        ("Warning", "FilteringFailed", "1 nodes CardInsufficientMemory(n)"),
    ]
    after = kube.get("pods", "p", "ns")
    assert after is not None and gated(after)
    # `hami explain` on the pod says the same, as the placer decides it.
    lines = explain(two_cards(), after, Defaults(), ResourceDefaults())
    assert lines[:3] == [
        "ns/p is pending (GPU policy 'spread', node policy 'binpack')",
        "  it waits for the DRA placer (scheduling gate hami.io/dra-placement)",
        "  0/1 nodes are available: 1 2/2 CardInsufficientMemory.",
    ]
    assert "  n: 2/2 CardInsufficientMemory" in lines


NO_DRIVER = (
    "0/0 nodes are available: no DRA driver publishes a device on any node (no ResourceSlice "
    "names one); the pod takes its NVIDIA devices from DeviceClass "
    "hami-core-gpu.project-hami.io of driver hami-core-gpu.project-hami.io: install that DRA "
    'driver on the nodes that should run it (docs/dra.md, "What to install"), or recreate the '
    "pod annotated hami.io/device-world: device-plugin to leave it to HAMi's device plugin."
)


def test_a_pod_with_no_node_a_dra_driver_publishes_is_told_which_driver_to_install() -> None:
    """Before, the Event and `hami explain` said `0/0 nodes are available: .`."""
    kube = FakeKube()
    kube.add("pods", stored_pod())
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])  # the device plugin's cards only
    events = RecordedEvents()
    p = placer(kube, cache, report=FilterReporter(events, gated=True))
    assert asyncio.run(p.place("ns", "p", "u-1")) is False
    assert events.seen == [
        ("Warning", "FailedScheduling", NO_DRIVER),
        ("Warning", "FilteringFailed", NO_DRIVER),
    ]
    after = kube.get("pods", "p", "ns")
    assert after is not None and gated(after)
    lines = explain(cache, after, Defaults(), ResourceDefaults(), dra_classes=DRA.classes)
    assert lines[2] == f"  {NO_DRIVER}"


def test_a_dra_pod_that_goes_brings_the_waiting_pods_forward() -> None:
    kube = FakeKube()
    p = placer(kube)
    waiting = stored_pod(uid="u-w")
    p.seen(waiting)
    p._due[("ns", "p", "u-w")] = (100.0, 32.0)  # waited long already
    p.gone({"metadata": {"name": "other", "namespace": "ns", "uid": "x"}})  # no DRA pod
    assert p._due[("ns", "p", "u-w")] == (100.0, 32.0)
    p.gone(stored_pod("holder", uid="u-h"))
    assert p._due[("ns", "p", "u-w")] == (0.0, p.retry_seconds)


def test_the_placers_decision_is_reported_with_its_card_scores() -> None:
    kube = FakeKube()
    kube.add("pods", stored_pod())
    outcomes: list[FilterOutcome] = []
    assert asyncio.run(placer(kube, report=outcomes.append).place("ns", "p", "u-1")) is True
    (outcome,) = outcomes
    assert outcome.decision is not None and outcome.decision.node == "n"
    assert [dict(cs.items()) for cs in outcome.decision.scores] == [{"GPU-0": 0.0, "GPU-1": 0.0}]
    assert outcome.pod.name == "p"


def test_a_pod_another_install_gated_is_left_to_it() -> None:
    """A second install in DRA mode gates its pods with the same gate and record; ours must
    not race it for them (its schedulerName is not ours)."""
    kube = FakeKube()
    stored = stored_pod()
    assert stored["spec"]["schedulerName"] == SCHEDULER
    stored["spec"]["schedulerName"] = "other-hami"
    pod = kube.add("pods", stored)
    assert gated(pod)
    p = placer(kube)
    p.seen(pod)
    assert not p._due
    assert asyncio.run(p.place("ns", "p", "u-1")) is True
    assert kube.get("resourceclaims", "p-c", "ns") is None
    assert [c[0] for c in kube.landed if not c[0].startswith("get_")] == []


def test_a_claim_an_earlier_leader_made_is_kept_and_the_gate_lifted() -> None:
    kube = FakeKube()
    pod = kube.add("pods", stored_pod())
    made = {"metadata": {"name": "p-c", "ownerReferences": [{"uid": "u-1"}]}, "spec": {}}
    kube.add("resourceclaims", {**made, "metadata": {**made["metadata"], "namespace": "ns"}})
    assert place(kube, pod) is True
    kept = kube.get("resourceclaims", "p-c", "ns")
    assert kept is not None and kept["spec"] == {}  # not made again
    assert "create_resource_claim" not in [c[0] for c in kube.landed]
    after = kube.get("pods", "p", "ns")
    assert after is not None and GATE not in str(after["spec"].get("schedulingGates"))


def test_a_claim_of_an_earlier_pod_of_the_name_holds_the_pod_gated() -> None:
    kube = FakeKube()
    pod = kube.add("pods", stored_pod())
    stale = {"metadata": {"name": "p-c", "namespace": "ns", "ownerReferences": [{"uid": "old"}]}}
    kube.add("resourceclaims", stale)
    assert place(kube, pod) is False  # tried again once the garbage collector took it
    after = kube.get("pods", "p", "ns")
    assert after is not None and gated(after)


def test_a_pod_gone_or_recreated_is_left_alone() -> None:
    kube = FakeKube()
    pod = stored_pod()
    assert place(kube, pod) is True  # gone
    kube.add("pods", stored_pod(uid="u-2"))
    assert place(kube, pod) is True  # another pod of the name: its own event brings it
    assert kube.get("resourceclaims", "p-c", "ns") is None


def stranded_pod(kube: FakeKube, allocated: bool) -> dict[str, Any]:
    """A placed pod kube-scheduler turned away: its card filled up after the placer chose it
    (or, with `allocated`, its claim was allocated just after)."""
    pod = stored_pod()
    del pod["spec"]["schedulingGates"]
    pod["status"] = {
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 cannot allocate all claims.",
            }
        ]
    }
    kube.add("pods", pod)
    claim: dict[str, Any] = {
        "metadata": {
            "name": "p-c",
            "namespace": "ns",
            "uid": "c-1",
            "ownerReferences": [{"uid": "u-1"}],
        },
        "spec": {"pinned": "GPU-1"},
    }
    if allocated:
        claim["status"] = {"allocation": {"devices": {"results": []}}}
    kube.add("resourceclaims", claim)
    return pod


def test_a_claim_left_unallocated_is_deleted_and_placed_again() -> None:
    kube = FakeKube()
    pod = stranded_pod(kube, allocated=False)
    assert stranded(pod) and not gated(pod)
    assert place(kube, pod) is True
    again = kube.get("resourceclaims", "p-c", "ns")
    assert again is not None and again["metadata"].get("uid") != "c-1"
    assert "devices" in again["spec"]
    writes = [c[0] for c in kube.landed if not c[0].startswith("get_")]
    assert writes == ["delete_resource_claim", "patch_pod_status", "create_resource_claim"]


def test_a_refusal_acted_on_does_not_unpin_the_claim_made_after_it() -> None:
    """kube-scheduler's refusal stays in the pod's condition until it writes another: read
    again on the pod's next event, it must not have the new claim deleted (kube-scheduler may
    be allocating it: seen in a hand-over burst, where PreBind then failed with 'claim got
    deleted in the meantime' and the pod waited minutes for a retry)."""
    kube = FakeKube()
    stranded_pod(kube, allocated=False)
    assert place(kube, kube.get("pods", "p", "ns") or {}) is True
    made = kube.get("resourceclaims", "p-c", "ns")
    assert made is not None
    after = kube.get("pods", "p", "ns")
    assert after is not None and not stranded(after)
    kube.landed.clear()
    assert place(kube, after) is True
    kept = kube.get("resourceclaims", "p-c", "ns")
    assert kept == made
    assert [c[0] for c in kube.landed if not c[0].startswith("get_")] == []


def test_a_stranded_pod_whose_claim_went_while_no_card_had_room_is_placed_again() -> None:
    # Its claim deleted on an earlier try that found no room: the pod has no claim to wait on.
    kube = FakeKube()
    stranded_pod(kube, allocated=False)
    kube.remove("resourceclaims", "p-c", "ns")
    assert place(kube, kube.get("pods", "p", "ns") or {}) is True
    assert "GPU-" in pinned(kube)


def test_a_claim_allocated_meanwhile_stays() -> None:
    kube = FakeKube()
    pod = stranded_pod(kube, allocated=True)
    assert place(kube, pod) is True
    kept = kube.get("resourceclaims", "p-c", "ns")
    assert kept is not None and kept["metadata"]["uid"] == "c-1"
    assert [c[0] for c in kube.landed if not c[0].startswith("get_")] == []


def test_a_node_only_a_dra_driver_serves_takes_dra_pods_and_no_device_plugin_pod() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.dra.replace_slices([node_slice("d", ["GPU-d-0", "GPU-d-1"])])
    kube = FakeKube()
    pod = kube.add("pods", stored_pod())
    assert place(kube, pod, cache) is True
    assert "GPU-d-" in pinned(kube)
    # No device plugin there to honour a device-plugin pod's annotations.
    outcome = Placement(cache, Defaults(), ResourceDefaults()).filter(
        gpu_pod("dp", mem=1000), ["d"]
    )
    assert outcome.node_names is None and outcome.failed


def test_a_card_only_the_device_plugin_serves_is_never_pinned() -> None:
    # Spread (the default) would take the empty GPU-0; no DRA driver publishes it.
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])
    cache.dra.replace_slices([node_slice("n", ["GPU-1"])])
    cache.reserve("dp", "ns", "dp", "n", ((ContainerDevice("GPU-1", 1000, 0),),), 0)
    kube = FakeKube()
    pod = kube.add("pods", stored_pod())
    assert place(kube, pod, cache) is True
    assert "GPU-1" in pinned(kube) and "GPU-0" not in pinned(kube)


# The placer chooses only among the nodes kube-scheduler could bind the pod to (its
# nodeSelector, required node affinity, tolerations, cordon: hami.engine.nodeselect), and says
# so when none is left. The selector on the real control plane: tests/e2e/test_dra_mode.py.

AFFINITY = "node(s) didn't match Pod's node affinity/selector"


def two_nodes(a: dict[str, Any] | None = None) -> tuple[ClusterCache, list[dict[str, Any]]]:
    """Nodes a and b, two T4s each, served by both worlds; binpack (the default node policy)
    prefers a, where a device-plugin pod holds a card. `a` is merged into a's Node object."""
    nodes = [registered_node("a", t4s(2, "GPU-a")), registered_node("b", t4s(2, "GPU-b"))]
    nodes[0]["metadata"]["labels"] = {"zone": "east"}
    nodes[1]["metadata"]["labels"] = {"zone": "west"}
    nodes[0]["spec"] = dict(a or {})
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes(nodes)
    cache.dra.replace_slices(
        [node_slice("a", ["GPU-a-0", "GPU-a-1"]), node_slice("b", ["GPU-b-0", "GPU-b-1"])]
    )
    cache.reserve("dp", "ns", "dp", "a", ((ContainerDevice("GPU-a-1", 1000, 0),),), 0)
    return cache, nodes


def placed_on(cache: ClusterCache, spec: dict[str, Any]) -> str:
    """The node whose card the placer pinned the pod's claim to."""
    kube = FakeKube()
    pod = stored_pod()
    pod["spec"].update(spec)
    kube.add("pods", pod)
    assert asyncio.run(placer(kube, cache).place("ns", "p", "u-1")) is True
    return "a" if "GPU-a-" in pinned(kube) else "b"


def test_required_node_affinity_leaves_out_the_node_it_does_not_match() -> None:
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["west"]}]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    assert placed_on(two_nodes()[0], {"affinity": affinity}) == "b"


def test_an_untolerated_taint_leaves_the_node_out_and_a_toleration_lets_it_in() -> None:
    taint = {"spec": {"taints": [{"key": "gpu", "value": "team-x", "effect": "NoSchedule"}]}}
    assert placed_on(two_nodes(taint["spec"])[0], {}) == "b"
    tolerations = [{"key": "gpu", "operator": "Equal", "value": "team-x"}]
    assert placed_on(two_nodes(taint["spec"])[0], {"tolerations": tolerations}) == "a"


def test_a_cordoned_node_is_left_out_and_taken_again_once_uncordoned() -> None:
    cache, nodes = two_nodes({"unschedulable": True})
    assert placed_on(cache, {}) == "b"
    nodes[0]["spec"] = {}
    cache.upsert_node(nodes[0])
    cache.release_unbound("u-1")
    assert placed_on(cache, {}) == "a"


def test_a_pod_no_node_may_take_stays_gated_and_the_user_is_told_which_rule() -> None:
    cache, _ = two_nodes({"unschedulable": True})
    kube = FakeKube()
    pod = stored_pod()
    pod["spec"]["nodeSelector"] = {"zone": "east"}
    kube.add("pods", pod)
    events = RecordedEvents()
    p = placer(kube, cache, report=FilterReporter(events, gated=True))
    assert asyncio.run(p.place("ns", "p", "u-1")) is False
    assert events.seen[0] == (
        "Warning",
        "FailedScheduling",
        f"0/2 nodes are available: 1 {AFFINITY}, 1 node(s) were unschedulable.",
    )
    after = kube.get("pods", "p", "ns")
    assert after is not None and gated(after) and kube.get("resourceclaims", "p-c", "ns") is None
    # `hami explain` reads the Node objects and says the same of the gated pod.
    _, nodes = two_nodes({"unschedulable": True})
    lines = explain(cache, after, Defaults(), ResourceDefaults(), nodes=nodes)
    assert f"  0/2 nodes are available: 1 {AFFINITY}, 1 node(s) were unschedulable." in lines
    assert "  a: node(s) were unschedulable" in lines and f"  b: {AFFINITY}" in lines
