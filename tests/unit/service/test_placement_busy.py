"""Under contention a pod goes to a node a bind would not wait on (binpack bursts)."""

import pytest

from hami.cache.store import ClusterCache
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.service.placement import Placement
from tests.builders import FAMILIES, allocated_pod, gpu_pod, registered_node, t4s
from tests.fakes.clock import Clock

BINPACK = {"hami.io/node-scheduler-policy": "binpack"}


@pytest.mark.parametrize(
    ("busy", "candidates", "chosen"),
    [
        (set(), ["m", "n"], "n"),  # binpack: the node in use
        ({"n"}, ["m", "n"], "m"),  # ... unless a bind to it would wait: the free node takes it
        ({"n", "m"}, ["m", "n"], "n"),  # every node busy: binpack's choice stands
        ({"m"}, ["m", "n"], "n"),
        # The only candidate without binds ahead takes no pod (unregistered): binpack's choice.
        ({"n", "m"}, ["m", "n", "unregistered"], "n"),
    ],
)
def test_binpack_prefers_a_node_no_bind_waits_on_when_its_choice_is_busy(
    busy: set[str], candidates: list[str], chosen: str
) -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2)), registered_node("m", t4s(2))])
    cache.replace_pods([allocated_pod("held", "GPU-0")])  # on node n
    placement = Placement(cache, Defaults(), ResourceDefaults())
    placement.busy = lambda: dict.fromkeys(busy, 1)
    outcome = placement.filter(gpu_pod("new", annotations=BINPACK), candidates)
    assert outcome.node_names == [chosen]
    reservation = cache.reservation("uid-new")
    assert reservation is not None and reservation.node == chosen


def test_a_decision_not_yet_bound_makes_its_node_busy_for_the_next_pod() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2)), registered_node("m", t4s(2))])
    cache.replace_pods([allocated_pod("held", "GPU-0")])
    placement = Placement(cache, Defaults(), ResourceDefaults())
    placement.busy = dict
    assert placement.filter(gpu_pod("a", annotations=BINPACK), ["m", "n"]).node_names == ["n"]
    # a's bind has not shown in the watch: b goes to the node nobody is binding to.
    assert placement.filter(gpu_pod("b", annotations=BINPACK), ["m", "n"]).node_names == ["m"]
    # Both nodes now await a bind: binpack's choice stands.
    assert placement.filter(gpu_pod("c", annotations=BINPACK), ["m", "n"]).node_names == ["n"]
    # The pod placed again is not in its own way.
    assert placement.filter(gpu_pod("c", annotations=BINPACK), ["m", "n"]).node_names == ["n"]


def test_when_every_node_is_busy_the_pod_goes_where_fewest_binds_are_ahead() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2)), registered_node("m", t4s(2))])
    cache.replace_pods([allocated_pod("held", "GPU-0")])
    placement = Placement(cache, Defaults(), ResourceDefaults())
    ahead = {"n": 3, "m": 1}
    placement.busy = lambda: ahead
    assert placement.filter(gpu_pod("a", annotations=BINPACK), ["m", "n"]).node_names == ["m"]


def test_a_pod_that_fits_nowhere_gets_every_candidates_reason_busy_or_not() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2)), registered_node("m", t4s(2))])
    placement = Placement(cache, Defaults(), ResourceDefaults())
    placement.busy = lambda: {"n": 1}
    outcome = placement.filter(gpu_pod("big", mem=20000, annotations=BINPACK), ["m", "n", "gone"])
    assert outcome.node_names is None
    assert sorted(outcome.failed) == ["gone", "m", "n"]
    assert outcome.failed["n"] == outcome.failed["m"] == "2/2 CardInsufficientMemory"
