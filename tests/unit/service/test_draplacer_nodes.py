"""The DRA placer chooses only among the nodes kube-scheduler could bind the pod to (its
nodeSelector, required node affinity, tolerations, cordon: hami.engine.nodeselect), and says
so when none is left. The selector on the real control plane: tests/e2e/test_dra_mode.py."""

import asyncio
from typing import Any

from hami.cache.store import ClusterCache
from hami.engine.model import ContainerDevice
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.runtime.reporting import FilterReporter
from hami.service.draplacer import gated
from hami.service.explain import explain
from tests.builders import FAMILIES, registered_node, t4s
from tests.drapods import stored_pod
from tests.fakes.clock import Clock
from tests.fakes.events import RecordedEvents
from tests.fakes.kubeapi import FakeKube
from tests.unit.service.test_draplacer import node_slice, pinned, placer

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
