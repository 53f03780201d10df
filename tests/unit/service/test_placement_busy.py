"""Under contention a pod goes to a node a bind would not wait on (binpack bursts)."""

from typing import Any

import pytest

from hami.cache.store import ClusterCache
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.service.placement import Placement
from tests.builders import FAMILIES, registered_node, t4s
from tests.unit.cache.test_store import Clock, pod


def gpu_pod(uid: str) -> dict[str, Any]:
    return {
        "metadata": {
            "uid": uid,
            "namespace": "ns",
            "name": uid,
            "annotations": {"hami.io/node-scheduler-policy": "binpack"},
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}},
                }
            ]
        },
    }


@pytest.mark.parametrize(
    ("busy", "chosen"),
    [
        (set(), "n"),  # binpack: the node in use
        ({"n"}, "m"),  # ... unless a bind to it would wait: the free node takes the pod
        ({"n", "m"}, "n"),  # every node busy: binpack's choice stands
        ({"m"}, "n"),
    ],
)
def test_binpack_prefers_a_node_no_bind_waits_on_when_its_choice_is_busy(
    busy: set[str], chosen: str
) -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2)), registered_node("m", t4s(2))])
    cache.replace_pods([pod("held", "GPU-0")])  # on node n
    placement = Placement(cache, Defaults(), ResourceDefaults())
    placement.busy = lambda name: int(name in busy)
    outcome = placement.filter(gpu_pod("new"), ["m", "n"])
    assert outcome.node_names == [chosen]
    reservation = cache.reservation("new")
    assert reservation is not None and reservation.node == chosen


def test_a_decision_not_yet_bound_makes_its_node_busy_for_the_next_pod() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2)), registered_node("m", t4s(2))])
    cache.replace_pods([pod("held", "GPU-0")])
    placement = Placement(cache, Defaults(), ResourceDefaults())
    placement.busy = lambda name: 0
    assert placement.filter(gpu_pod("a"), ["m", "n"]).node_names == ["n"]
    # a's bind has not shown in the watch: b goes to the node nobody is binding to.
    assert placement.filter(gpu_pod("b"), ["m", "n"]).node_names == ["m"]
    # Both nodes now await a bind: binpack's choice stands.
    assert placement.filter(gpu_pod("c"), ["m", "n"]).node_names == ["n"]
    # The pod placed again is not in its own way.
    assert placement.filter(gpu_pod("c"), ["m", "n"]).node_names == ["n"]


def test_when_every_node_is_busy_the_pod_goes_where_fewest_binds_are_ahead() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2)), registered_node("m", t4s(2))])
    cache.replace_pods([pod("held", "GPU-0")])
    placement = Placement(cache, Defaults(), ResourceDefaults())
    ahead = {"n": 3, "m": 1}
    placement.busy = ahead.__getitem__
    assert placement.filter(gpu_pod("a"), ["m", "n"]).node_names == ["m"]
