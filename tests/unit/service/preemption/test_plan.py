"""What the preemption service feeds the engine: priorities, starts, budgets, plans under way."""

import asyncio
from typing import Any

from hami.cache.store import ClusterCache
from hami.engine.model import ContainerDevice, ContainerRequest, PodRequest
from hami.engine.pdb import parse_budget
from hami.engine.policy import pod_options
from hami.engine.preempt import Preemption, Preemptor
from hami.engine.requests import ResourceDefaults
from hami.service.annotations import allocation_annotations
from hami.service.preemption.facts import PodFacts, preemptor_of
from hami.service.preemption.lines import describe, kube_scheduler_words
from hami.service.preemption.plan import NODES_PER_TURN, Planned, at_once, field, paced
from tests.builders import FAMILIES, registered_node, t4s


def pod(uid: str, card: str, mem: int, priority: int, start: int, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "uid": uid,
            "namespace": "ns",
            "name": uid,
            "labels": {"tier": "low"},
            "annotations": allocation_annotations(
                "n", ((ContainerDevice(card, mem, 0),),), 0, families=FAMILIES
            ),
            **meta,
        },
        "spec": {
            "nodeName": "n",
            "priority": priority,
            "containers": [
                {
                    "name": "c",
                    "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mem}},
                }
            ],
        },
        "status": {"phase": "Running", "startTime": f"2026-01-01T00:00:{start:02d}Z"},
    }


def plan_of(*args: Any, **kw: Any) -> Preemption | None:
    return at_once(field(*args, **kw).planning())


def setup(*pods: dict[str, Any]) -> tuple[ClusterCache, PodFacts]:
    cache = ClusterCache(lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])
    cache.replace_pods(pods)
    facts = PodFacts()
    facts.replace(pods)
    return cache, facts


def wants(mem: int, priority: int = 1000) -> Preemptor:
    request = PodRequest(app=(ContainerRequest(nums=1, memreq=mem),))
    return Preemptor(
        request,
        pod_options({"hami.io/gpu-scheduler-policy": "binpack"}),
        priority,
        families=FAMILIES,
    )


LOW = (pod("a", "GPU-0", 8000, 1, 1), pod("b", "GPU-1", 8000, 1, 2))


def victims(cache: ClusterCache, facts: PodFacts, **kw: Any) -> list[str] | None:
    chosen = plan_of(cache, facts, wants(11000), "me", ["n"], **kw)
    return None if chosen is None else [v.name for v in chosen.victims]


def test_the_pod_that_started_last_is_the_victim_and_the_plan_says_where_it_fits() -> None:
    cache, facts = setup(*LOW)
    chosen = plan_of(cache, facts, wants(11000), "me", ["n"])
    assert chosen is not None
    assert [v.name for v in chosen.victims] == ["b"]
    assert [d.uuid for c in chosen.devices for d in c] == ["GPU-1"]
    lines = describe(chosen, wants(11000))
    assert "ns/b: priority 1 < 1000, holds 8000 MiB of GPU-1" in "\n".join(lines)


def test_equal_priority_terminating_and_never_give_no_plan() -> None:
    cache, facts = setup(*LOW)
    assert plan_of(cache, facts, wants(11000, priority=1), "me", ["n"]) is None
    never = Preemptor(wants(11000).request, wants(11000).options, 1000, "Never", families=FAMILIES)
    assert plan_of(cache, facts, never, "me", ["n"]) is None
    assert describe(None, never) == ["  preemption: never (preemptionPolicy: Never)"]
    gone = pod("b", "GPU-1", 8000, 1, 2, deletionTimestamp="2026-01-01T00:01:00Z")
    cache, facts = setup(LOW[0], gone)
    # b leaves by itself, so a is the only victim there is.
    assert victims(cache, facts) == ["a"]


def test_a_victim_of_a_plan_under_way_is_nobodys_victim_again() -> None:
    cache, facts = setup(*LOW)
    first = plan_of(cache, facts, wants(11000), "first", ["n"])
    assert first is not None
    cache.reserve("first", "ns", "first", "n", first.devices, 0, until=60.0)
    assert victims(cache, facts, doomed=frozenset({"b"})) == ["a"]


def test_a_budget_makes_kube_schedulers_order_spare_its_pods() -> None:
    budget = parse_budget(
        {
            "metadata": {"namespace": "ns", "name": "keep-b"},
            "spec": {"selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}},
            "status": {"disruptionsAllowed": 1},
        }
    )
    assert budget is not None
    cache, facts = setup(*LOW)
    chosen = plan_of(cache, facts, wants(11000), "me", ["n"], budgets=[budget])
    # a (more important: started first) spends the allowance; b would break the budget, so b
    # is reprieved first and a is evicted instead.
    assert chosen is not None and [v.name for v in chosen.victims] == ["a"]
    assert chosen.pdb_violations == 0


def test_the_preemptor_is_read_from_the_pod() -> None:
    spec = {"priority": 7, "preemptionPolicy": "Never"}
    p = preemptor_of({"spec": spec}, wants(1).request, wants(1).options, FAMILIES)
    assert (p.priority, p.policy) == (7, "Never")
    p = preemptor_of({"spec": {}}, wants(1).request, wants(1).options, FAMILIES)
    assert (p.priority, p.policy) == (0, "PreemptLowerPriority")


def test_facts_follow_pod_events_and_know_which_priorities_are_placed() -> None:
    facts = PodFacts()
    facts.replace(LOW)
    assert facts.any_below(2) and not facts.any_below(1)
    facts.upsert({**LOW[0], "status": {"phase": "Succeeded"}})
    facts.delete(LOW[1])
    assert facts.get("a") is None and facts.get("b") is None
    assert not facts.any_below(1000)
    pending = {**LOW[0], "spec": {**LOW[0]["spec"], "nodeName": ""}}
    facts.upsert(pending)
    assert facts.get("a") is None  # not placed: no victim
    facts.upsert(LOW[0])
    f = facts.get("a")
    assert f is not None and (f.priority, f.grace, f.terminating) == (1, 30.0, False)
    assert f.start == 1767225601.0  # 2026-01-01T00:00:01Z


KUBE_SCHEDULER = (
    "0/1 nodes are available: 1 4/4 CardInsufficientMemory. no new claims to deallocate, "
    "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
)


def test_explain_with_preemption_off_quotes_kube_scheduler_then_says_what_ours_would_do() -> None:
    pending = {"status": {"conditions": [{"type": "PodScheduled", "message": KUBE_SCHEDULER}]}}
    assert kube_scheduler_words(pending) == (
        "0/1 nodes are available: 1 No preemption victims found for incoming pod."
    )
    assert kube_scheduler_words({"status": {}}) is None  # not tried yet
    assert describe(None, wants(11000), "with hami serve --preemption") == [
        "  with hami serve --preemption: none helps: no GPU pod of priority below 1000 frees "
        "enough of a card on any node"
    ]


async def test_served_paced_the_plan_is_the_same_and_the_loop_is_handed_back_between_nodes() -> (
    None
):
    cache, facts = setup(*LOW)
    served = await paced(field(cache, facts, wants(11000), "me", ["n"]).planning())
    assert served == at_once(field(cache, facts, wants(11000), "me", ["n"]).planning())
    handed: list[int] = []
    nodes = 0

    def dry_runs() -> Planned:
        nonlocal nodes
        for _ in range(2 * NODES_PER_TURN + 3):
            nodes += 1
            yield
        return None

    async def other() -> None:  # a filter waiting for the loop
        while True:
            handed.append(nodes)
            await asyncio.sleep(0)

    task = asyncio.ensure_future(other())
    await asyncio.sleep(0)
    await paced(dry_runs())
    task.cancel()
    assert handed == [0, NODES_PER_TURN, 2 * NODES_PER_TURN]
