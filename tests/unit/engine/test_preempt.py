"""Preemption by card: which pods to evict and where, as kube-scheduler would choose them."""

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.engine.fit import fit_pod
from hami.engine.model import ContainerRequest, DeviceInfo, NodeState, PodRequest, Usage
from hami.engine.policy import pod_options
from hami.engine.preempt import Preemptor, Victim, choose, dry_runs, enough, victims_on
from hami.engine.state import build_node
from tests.builders import FAMILIES

T4 = 15360


def node(name: str, cards: int = 4, split: int = 10) -> NodeState:
    devices = [
        DeviceInfo(f"{name}-{i}", i, split, T4, 100, "NVIDIA-Tesla T4") for i in range(cards)
    ]
    return build_node(name, devices, registry=FAMILIES)


def loaded(state: NodeState, victims: Sequence[Victim]) -> NodeState:
    usage: dict[str, Usage] = {}
    for v in victims:
        for uuid, u in v.usage.items():
            usage[uuid] = usage.get(uuid, Usage()) + u
    return build_node(state.name, (c.info for c in state.cards), usage, registry=FAMILIES)


def victim(
    name: str,
    card: str,
    mem: int,
    priority: int,
    start: float = 0,
    cores: int = 0,
    pdb: bool = False,
) -> Victim:
    return Victim(name, "ns", name, priority, start, {card: Usage(1, mem, cores)}, pdb)


def wants(mem: int, policy: str = "binpack", priority: int = 100) -> Preemptor:
    request = PodRequest(app=(ContainerRequest(nums=1, memreq=mem),))
    options = pod_options({"hami.io/gpu-scheduler-policy": policy})
    return Preemptor(request, options, priority, families=FAMILIES)


def test_the_smallest_lower_priority_share_that_makes_room_is_evicted() -> None:
    base = node("n", cards=1)
    running = [
        victim("big-low", "n-0", 8000, 1, start=10),
        victim("small-low", "n-0", 4000, 1, start=20),
        victim("high", "n-0", 3000, 500),
    ]
    plan = victims_on(loaded(base, running), running, wants(4000))
    assert plan is not None
    # 360 MiB free: evicting small-low (4000) is enough; big-low is reprieved first as the older.
    assert [v.name for v in plan.victims] == ["small-low"]


def test_equal_or_higher_priority_is_never_a_victim() -> None:
    # preemptionPolicy Never is the service's to refuse (tests/unit/service/preemption/test_plan.py).
    base = node("n", cards=1)
    running = [victim("same", "n-0", 15000, 100), victim("higher", "n-0", 300, 200)]
    state = loaded(base, running)
    assert victims_on(state, running, wants(4000)) is None


def test_mutex_needs_a_card_emptied_of_every_tenant() -> None:
    base = node("n", cards=2)
    running = [
        victim("a1", "n-0", 1000, 1),
        victim("a2", "n-0", 1000, 1),
        victim("b1", "n-1", 1000, 1, start=5),
    ]
    plan = victims_on(loaded(base, running), running, wants(1000, policy="mutex"))
    assert plan is not None and [v.name for v in plan.victims] == ["b1"]


@pytest.mark.parametrize(
    ("a", "b", "winner", "why"),
    [
        ([victim("x", "a-0", 15360, 1, pdb=True)], [victim("y", "b-0", 15360, 5)], "b", "fewer PDB violations"),
        ([victim("x", "a-0", 15360, 5)], [victim("y", "b-0", 15360, 1)], "b", "lower highest priority"),
        (
            [victim("x1", "a-0", 8000, 1), victim("x2", "a-0", 7360, 1)],
            [victim("y", "b-0", 15360, 1)],
            "b",
            "smaller sum of priorities",
        ),
        ([victim("x", "a-0", 15360, 1, start=5)], [victim("y", "b-0", 15360, 1, start=9)], "b", "younger victims"),
        ([victim("x", "a-0", 15360, 1)], [victim("y", "b-0", 15360, 1)], "a", "first in order"),
    ],
)  # fmt: skip
def test_node_choice_follows_kube_schedulers_order(
    a: list[Victim], b: list[Victim], winner: str, why: str
) -> None:
    running = {"a": a, "b": b}
    cluster = {n: loaded(node(n, cards=1), victims) for n, victims in running.items()}
    plans = [victims_on(cluster[n], running[n], wants(15360)) for n in ("a", "b")]
    plan = choose([p for p in plans if p is not None])
    assert plan is not None and plan.node == winner, why


share = st.tuples(
    st.integers(0, 2), st.integers(500, 9000), st.integers(-5, 5), st.integers(0, 100)
)


@settings(max_examples=300, deadline=None)
@given(
    shares=st.lists(share, max_size=10),
    mem=st.integers(1000, 15360),
    policy=st.sampled_from(["binpack", "spread", "mutex"]),
    priority=st.integers(-3, 6),
)
def test_victims_are_lower_priority_sufficient_and_irreducible(
    shares: list[tuple[int, int, int, int]], mem: int, policy: str, priority: int
) -> None:
    base = node("n", cards=3, split=4)
    running: list[Victim] = []
    for i, (card, m, prio, start) in enumerate(shares):
        used = loaded(base, running).cards[card].usage
        if used.usedmem + m > T4 or used.used >= 4:
            continue  # never over-commit the starting state
        running.append(victim(f"v{i}", f"n-{card}", m, prio, start))
    pod = wants(mem, policy, priority)

    def fits(left: list[Victim]) -> bool:
        return fit_pod(loaded(base, left), pod.request, pod.options, 0).devices is not None

    plan = victims_on(loaded(base, running), running, pod)
    lower = [v for v in running if v.priority < priority]
    if plan is None:
        assert not lower or not fits([v for v in running if v not in lower])
        return
    assert all(v.priority < priority for v in plan.victims)
    kept = [v for v in running if v not in plan.victims]
    assert fits(kept), "the preemptor fits once its victims are gone"
    # The cards the hold reserves are the very ones the pod is then given.
    after = fit_pod(loaded(base, kept), pod.request, pod.options, 0).devices
    assert plan.devices == after
    for spared in plan.victims:
        assert not fits([*kept, spared]), f"{spared.name} could have been spared"


@pytest.mark.parametrize(
    ("nodes", "dry_run"),
    [(0, 0), (5, 5), (100, 100), (500, 100), (1000, 100), (1500, 150), (5000, 500)],
)
def test_as_many_candidates_as_kube_scheduler_dry_runs(nodes: int, dry_run: int) -> None:
    # calcNumCandidates: 10 % of the nodes, at least 100, at most all of them.
    assert enough(nodes) == dry_run


def test_dry_runs_stop_once_enough_nodes_are_candidates_and_build_no_node_beyond() -> None:
    names = [f"n{i}" for i in range(150)]
    reached: list[str] = []

    def node_of(name: str) -> tuple[NodeState, Sequence[Victim]]:
        reached.append(name)
        v = victim(f"{name}-low", f"{name}-0", 8000, 1)
        return loaded(node(name, cards=1), [v]), [v]

    plans = list(dry_runs(names, node_of, wants(15360)))
    assert len(plans) == 100 and all(p is not None for p in plans)
    assert reached == names[:100]
