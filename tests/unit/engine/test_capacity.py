"""Node summaries: a node turned down unseen gets the very reason and scores fitting it gives.

The reference is the card-by-card fit (fit_pod_uncached) and the decision as
it was made before summaries: every node fitted in preference order. Random
nodes are drawn to sit on the edges the checks compare against (exactly
full, one over, mixed card sizes, no cores at all).
"""

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.engine import reasons as r
from hami.engine.capacity import capacity_of
from hami.engine.decide import Decision, schedule
from hami.engine.fit import fit_pod_uncached
from hami.engine.model import CardScores, ContainerRequest, DeviceInfo, NodeState, PodRequest, Usage
from hami.engine.policy import PodOptions, pod_options
from hami.engine.state import build_node
from hami.engine.summarycheck import SEEN_SIZE, summary_check
from tests.builders import FAMILIES, t4

TYPES = ("NVIDIA-Tesla T4", "NVIDIA A100-SXM4-40GB")
MODES = ("hami-core", "mig")


# One card: (size, cores, split, model, NUMA node, mode, healthy, cordoned), then its usage as
# (used, memory, cores), each an index into the choices that sit on the checks' edges.
cards = st.tuples(
    st.tuples(
        st.integers(0, 1),
        st.integers(0, 2),
        st.sampled_from([10, 1, 0, 4]),
        st.integers(0, 1),
        st.integers(0, 1),
        st.integers(0, 1),
        st.integers(0, 3).map(bool),  # mostly healthy
        st.integers(0, 5).map(lambda i: i == 0),  # now and then cordoned
    ),
    st.none() | st.tuples(st.integers(0, 11), st.integers(0, 4), st.integers(0, 3)),
)
node_kinds = st.tuples(
    st.sampled_from([(15360, 15360), (15360, 40000), (0, 1000)]),
    st.sampled_from([(100, 100, 100), (100, 0, 100), (100, 50, 120)]),
    st.booleans(),  # mixed models
    st.booleans(),  # mixed modes
)


@st.composite
def nodes(draw: Any, name: str = "n") -> NodeState:
    (sizes, cores, models, modes) = draw(node_kinds)
    devices, usage, cordoned = [], {}, set()
    for i, (card, used) in enumerate(draw(st.lists(cards, max_size=8))):
        size, core, count, model, numa, mode, healthy, cordon = card
        info = DeviceInfo(
            f"{name}-GPU-{i}",
            i,
            count,
            sizes[size],
            cores[core],
            TYPES[model if models else 0],
            numa,
            MODES[mode if modes else 0],
            healthy,
        )
        devices.append(info)
        if cordon:
            cordoned.add(info.id)
        if used is not None:
            slots, mem, busy = used
            memory = (0, info.devmem, info.devmem + 1, info.devmem - 1000, info.devmem // 3)
            in_use = (0, info.devcore, info.devcore - 30, info.devcore + 1)
            usage[info.id] = Usage(min(slots, count + 1), max(memory[mem], 0), in_use[busy])
    return build_node(name, devices, usage, frozenset(cordoned), registry=FAMILIES)


containers = st.builds(
    ContainerRequest,
    nums=st.sampled_from([1, 1, 2, 3]) | st.integers(1, 9),
    memreq=st.sampled_from([0, 1000, 15360, 16000]) | st.integers(0, 41000),
    mem_percentage=st.sampled_from([101, 100, 50]) | st.integers(1, 100),
    coresreq=st.sampled_from([0, 100, 150, 30]) | st.integers(0, 100),
)
requests = st.builds(
    PodRequest,
    init=st.lists(st.none() | containers, max_size=2).map(tuple),
    app=st.lists(st.none() | containers, min_size=1, max_size=3).map(tuple),
)
annotations = st.fixed_dictionaries(
    {
        "hami.io/gpu-scheduler-policy": st.sampled_from(
            ["spread", "binpack", "mutex", "mutex,binpack", "numa", "topology-aware"]
        ),
        "hami.io/node-scheduler-policy": st.sampled_from(["binpack", "spread"]),
    },
    optional={
        "nvidia.com/numa-bind": st.sampled_from(["true", "false"]),
        "nvidia.com/use-gputype": st.sampled_from(["t4", "a100", "t4,a100"]),
        "nvidia.com/nouse-gputype": st.sampled_from(["t4", "h100"]),
        "nvidia.com/vgpu-mode": st.sampled_from(MODES),
        "nvidia.com/use-gpuuuid": st.just("n-GPU-0,n-GPU-2"),
        "nvidia.com/nouse-gpuuuid": st.just("n-GPU-1"),
        "hami.io/device-scoring-weights": st.just("slot=0,core=2,memory=1"),
    },
)


@settings(max_examples=800, deadline=None)
@given(nodes(), requests, annotations)
def test_a_node_turned_down_unseen_gets_the_reason_fitting_it_gives(
    node: NodeState, request: PodRequest, ann: dict[str, str]
) -> None:
    opts = pod_options(ann)
    check = summary_check(request, opts)
    log: list[CardScores] = []
    reason = None if check is None else check.check(node, log)
    if reason is None:
        assert log == []
        return
    fit = fit_pod_uncached(node, request, opts)
    assert fit.devices is None
    assert reason == fit.reason
    [scored] = log
    assert (scored.node, scored.cards) == (node.name, node.cards)
    assert ((scored.container, scored.scores),) == fit.scores


def slow_schedule(
    cluster: dict[str, NodeState], request: PodRequest, opts: PodOptions, names: list[str]
) -> Decision:
    """The decision before summaries, spelt out: every node fitted, in preference order."""
    failed: dict[str, str] = {}
    known = []
    for name in names:
        if name in cluster:
            known.append(cluster[name])
        else:
            failed[name] = r.NODE_UNREGISTERED
    sign = 1 if opts.node_policy == "spread" else -1
    scores: list[CardScores] = []
    for node in sorted(known, key=lambda n: (sign * n.score, n.name)):
        fit = fit_pod_uncached(node, request, opts)
        scores.extend(CardScores(node.name, c, node.cards, s) for c, s in fit.scores)
        if fit.devices is not None:
            return Decision(node.name, fit.devices, failed, tuple(scores), node.score)
        failed[node.name] = fit.reason
    return Decision(None, None, failed, tuple(scores))


@settings(max_examples=150, deadline=None)
@given(st.lists(nodes(), max_size=6), requests, annotations)
def test_decisions_are_those_made_by_fitting_every_node(
    states: list[NodeState], request: PodRequest, ann: dict[str, str]
) -> None:
    """Each node twice, under two names: a decision answers a class of equal summaries once,
    and each copy must still get what fitting it gives."""
    cluster = {
        f"node-{i}": build_node(
            f"node-{i}",
            [c.info for c in s.cards],
            {c.info.id: c.usage for c in s.cards},
            s.cordoned,
            registry=FAMILIES,
        )
        for i, s in enumerate([*states, *states])
    }
    names = [*reversed(cluster), "ghost"]
    opts = pod_options(ann)
    fast, slow = (
        schedule(cluster, request, opts, names, families=FAMILIES),
        slow_schedule(cluster, request, opts, names),
    )
    if slow.node is None:
        # Every node turned down: kube-scheduler reads a map, so the order is the
        # candidates' (summaries answer them all at once), not the preference order.
        assert (fast.node, fast.devices, fast.failed) == (None, None, slow.failed)
        assert sorted(fast.scores, key=_by_node) == sorted(slow.scores, key=_by_node)
        return
    assert fast == slow
    # The nodes tried before the one chosen, in preference order.
    assert list(fast.failed.items()) == list(slow.failed.items())


def _by_node(scores: CardScores) -> tuple[str, int]:
    return scores.node, scores.container


def turned_down(node: NodeState, request: PodRequest, **ann: str) -> str | None:
    """The node's reason when its summary turns the pod down."""
    check = summary_check(request, pod_options(ann))
    assert check is not None
    return check.check(node, [])


ONE = PodRequest(app=(ContainerRequest(1, 1000),))


@pytest.mark.parametrize(
    ("usage", "request_", "policy", "reason"),
    [
        (Usage(10, 10000, 0), ONE, "binpack", "4/4 CardTimeSlicingExhausted"),
        (Usage(3, 15000, 0), ONE, "binpack", "4/4 CardInsufficientMemory"),
        (Usage(1, 1000, 100), ONE, "binpack", "4/4 CardComputeUnitsExhausted"),
        (Usage(1, 1000, 0), ONE, "mutex", "4/4 ExclusiveDeviceAllocateConflict"),
        (
            Usage(1, 1000, 0),
            PodRequest(app=(ContainerRequest(1, 1000, coresreq=100),)),
            "binpack",
            "4/4 ExclusiveDeviceAllocateConflict",
        ),
        (
            Usage(1, 1000, 80),
            PodRequest(app=(ContainerRequest(1, 1000, coresreq=30),)),
            "binpack",
            "4/4 CardInsufficientCore",
        ),
        (
            Usage(1, 1000, 0),
            PodRequest(app=(ContainerRequest(5, 1000),)),
            "binpack",
            r.NODE_INSUFFICIENT_DEVICE,
        ),
    ],
)
def test_full_nodes_are_turned_down_by_their_summary(
    usage: Usage, request_: PodRequest, policy: str, reason: str
) -> None:
    """The ways binpack leaves a node full, each answered without a card walk."""
    node = build_node(
        "n", [t4(i) for i in range(4)], {f"GPU-{i}": usage for i in range(4)}, registry=FAMILIES
    )
    assert turned_down(node, request_, **{"hami.io/gpu-scheduler-policy": policy}) == reason


def test_a_node_that_might_fit_is_left_to_the_card_walk() -> None:
    node = build_node("n", [t4(0), t4(1)], {"GPU-0": Usage(1, 15000, 0)}, registry=FAMILIES)
    assert turned_down(node, ONE) is None
    two = PodRequest(app=(ContainerRequest(2, 1000),))
    reason = turned_down(node, two)
    assert reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory"


def test_a_state_keeps_a_bounded_number_of_texts() -> None:
    node = build_node(
        "n",
        [t4(i) for i in range(4)],
        {f"GPU-{i}": Usage(1, 15000, 0) for i in range(4)},
        registry=FAMILIES,
    )
    for cores in range(101):
        reason = turned_down(node, PodRequest(app=(ContainerRequest(1, 1000, coresreq=cores),)))
        assert reason == "4/4 CardInsufficientMemory"
    assert 0 < len(capacity_of(node).seen) <= SEEN_SIZE  # type: ignore[union-attr]


def test_a_state_replaced_with_other_cards_is_summed_up_afresh() -> None:
    """What is derived from a state (its summary, its fit results) lives with that state:
    dataclasses.replace with full cards gives a state on which nothing fits, not the old
    summary's 'fits'."""
    free = build_node("n", [t4(0)], {}, registry=FAMILIES)
    assert turned_down(free, ONE) is None and fit_pod_uncached(free, ONE, pod_options({}))
    full = build_node("n", [t4(0)], {"GPU-0": Usage(1, 15360, 0)}, registry=FAMILIES)
    replaced = replace(free, cards=full.cards)
    assert turned_down(replaced, ONE) == turned_down(full, ONE) == "1/1 CardInsufficientMemory"


IDLE_AND_FULL = {"GPU-1": Usage(1, 15000, 0)}  # GPU-0 idle, GPU-1 full


@pytest.mark.parametrize(
    ("other", "policy"),
    [
        (
            build_node(
                "b", [t4(0), t4(1)], {**IDLE_AND_FULL, "GPU-0": Usage(1, 0, 0)}, registry=FAMILIES
            ),
            "mutex",
        ),
        (
            build_node(
                "b",
                [t4(0), t4(1)],
                {**IDLE_AND_FULL, "GPU-0": Usage(0, 15000, 0)},
                registry=FAMILIES,
            ),
            "spread",
        ),
        (
            build_node(
                "b", [t4(0), t4(1)], {**IDLE_AND_FULL, "GPU-0": Usage(0, 0, 100)}, registry=FAMILIES
            ),
            "spread",
        ),
        (
            build_node("b", [t4(0), t4(1)], IDLE_AND_FULL, frozenset({"GPU-0"}), registry=FAMILIES),
            "spread",
        ),
        (
            build_node(
                "b", [replace(t4(0), health=False), t4(1)], IDLE_AND_FULL, registry=FAMILIES
            ),
            "spread",
        ),
    ],
    ids=["in use", "fuller", "cores taken", "cordoned", "unhealthy"],
)
def test_nodes_alike_but_for_one_card_are_answered_apart(other: NodeState, policy: str) -> None:
    """The class two nodes share in one decision tells apart every card state a check reads:
    node a has GPU-0 idle, node b the same cards with GPU-0 otherwise."""
    ones = build_node("a", [t4(0), t4(1)], IDLE_AND_FULL, registry=FAMILIES)
    opts = pod_options({"hami.io/gpu-scheduler-policy": policy})
    asked = PodRequest(app=(ContainerRequest(2, 1000),))
    decision = schedule({"a": ones, "b": other}, asked, opts, ["a", "b"], families=FAMILIES)
    by_fitting = {n.name: fit_pod_uncached(n, asked, opts).reason for n in (ones, other)}
    assert decision.node is None
    assert dict(decision.failed) == by_fitting
    assert by_fitting["a"] != by_fitting["b"]


@settings(max_examples=600, deadline=None)
@given(
    st.lists(nodes(), min_size=1, max_size=6),
    st.sampled_from([1, 1, 2, 9]),
    st.sampled_from([15361, 40001, 0]) | st.sampled_from([16000, 41000]) | st.integers(0, 41000),
    st.sampled_from([101, 100]),  # with no memory asked, 100: a share of each card's
    st.sampled_from([0, 100, 30]),
    annotations,
    st.integers(0, 4).map(bool),  # mostly no card in MIG mode, which no summary answers
)
def test_nodes_turned_down_at_once_get_the_reason_each_node_s_check_gives(
    states: list[NodeState],
    nums: int,
    memreq: int,
    pct: int,
    cores: int,
    ann: dict[str, str],
    plain: bool,
) -> None:
    """Summaries.nowhere (every node at once, often where no card has the memory asked) answers
    each node as its own check and a card walk would, or leaves the decision to them."""
    nodes_ = [
        build_node(
            f"node-{i}",
            [replace(c.info, mode=MODES[0]) if plain else c.info for c in s.cards],
            {c.info.id: c.usage for c in s.cards},
            s.cordoned,
            registry=FAMILIES,
        )
        for i, s in enumerate(states)
    ]
    # Without the UUID selectors and weights, which summaries leave to the card walk.
    opts = pod_options({k: v for k, v in ann.items() if "uuid" not in k and "weights" not in k})
    request = PodRequest(app=(ContainerRequest(nums, memreq, pct, cores),))
    summaries = summary_check(request, opts)
    assert summaries is not None
    every = summaries.nowhere(nodes_)
    logs: list[CardScores] = []
    alone = summary_check(request, opts)  # a decision of its own: nothing answered yet
    each = [alone.check(n, logs) for n in nodes_]  # type: ignore[union-attr]
    if every is None:
        assert None in each
        return
    texts, logged = every
    assert texts == each
    assert logged == logs
    assert texts == [fit_pod_uncached(n, request, opts).reason for n in nodes_]
