"""Carrying out a preemption: eviction order, refusals, the hold and what the filter then says.

The API server is the in-memory fake of tests/fakes (evictions refused by name); the
real thing is exercised in tests/e2e/test_preemption.py.
"""

import asyncio
import copy
from collections.abc import Callable, Sequence
from typing import Any

from hami.cache.store import ClusterCache
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.kube.errors import KubeError, NotFound, Unavailable
from hami.kube.events import EventRecorder
from hami.service.placement import FilterOutcome, PodRef
from hami.service.preemption.facts import PodFacts
from hami.service.preemption.preempter import Preempter, PreemptingPlacement
from tests.builders import FAMILIES, registered_node, t4s
from tests.fakes.kubeapi import FakeKube, Fault
from tests.unit.service.preemption.test_plan import LOW

BUDGET = {
    "metadata": {"namespace": "ns", "name": "keep"},
    "spec": {"selector": {"matchLabels": {"tier": "low"}}},
    "status": {"disruptionsAllowed": 0},
}


def api(refuse: dict[str, KubeError] | None = None, budgets: bool = False) -> FakeKube:
    """The pods of the scenario; evictions of the pods named in `refuse` fail with its error."""
    kube = FakeKube()
    for pod in [*LOW, HIGH]:
        kube.add("pods", copy.deepcopy(pod))
    if budgets:
        kube.add("poddisruptionbudgets", copy.deepcopy(BUDGET))
    for name, error in (refuse or {}).items():
        kube.fail(Fault("evict_pod", error=error, target=name, times=100))
    return kube


def writes(kube: FakeKube) -> list[tuple[str, str, Any]]:
    """(evict or status, pod name, uid or status) of the calls preemption wrote."""
    short = {"evict_pod": "evict", "patch_pod_status": "status"}
    return [(short[m], t.rpartition("/")[2], body) for m, t, body in kube.calls if m in short]


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


HIGH = {
    "metadata": {"uid": "hi", "namespace": "ns", "name": "hi"},
    "spec": {
        "priority": 1000,
        "containers": [
            {
                "name": "c",
                "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 11000}},
            }
        ],
    },
}


def world(kube: FakeKube) -> tuple[PreemptingPlacement, ClusterCache, list[tuple[str, str]]]:
    clock = Clock()
    cache = ClusterCache(clock, families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])
    cache.replace_pods(LOW)
    seen: list[tuple[str, str]] = []
    return preempting(kube, cache, LOW, clock, seen), cache, seen


def preempting(
    kube: FakeKube,
    cache: ClusterCache,
    running: Sequence[dict[str, Any]],
    clock: Callable[[], float],
    seen: list[tuple[str, str]] | None = None,
) -> PreemptingPlacement:
    """Placement with preemption over `cache`, whose `running` pods may be preempted; each
    outcome and reason observed goes to `seen`."""
    facts = PodFacts()
    facts.replace(running)
    observed = [] if seen is None else seen
    preempter = Preempter(
        kube,
        cache,
        facts,
        EventRecorder(kube, rate=0),
        scheduler_name="hami-scheduler",
        hold_seconds=60,
        observe=lambda outcome, reason: observed.append((outcome, reason)),
        clock=clock,
    )
    return PreemptingPlacement(preempter, cache, Defaults(), ResourceDefaults())


async def filtered(placement: PreemptingPlacement) -> FilterOutcome:
    outcome = placement.filter(HIGH, ["n"])
    await asyncio.gather(*placement.preempter._tasks)
    return outcome


def test_the_victim_is_evicted_marked_and_the_pod_nominated_then_placed_on_the_held_card() -> None:
    async def run() -> None:
        kube = api()
        placement, cache, seen = world(kube)
        assert (await filtered(placement)).node_names is None
        assert [c[:2] for c in writes(kube)] == [("evict", "b"), ("status", "b"), ("status", "hi")]
        assert writes(kube)[1][2]["conditions"][0]["reason"] == "PreemptionByScheduler"
        assert writes(kube)[2][2] == {"nominatedNodeName": "n"}
        assert seen == [("attempted", ""), ("done", "")]
        # Victim still there: the hold stays and the answer says so; nothing more is evicted.
        again = await filtered(placement)
        assert "held for this pod while 1 preempted pod(s) terminate" in again.failed["n"]
        assert cache.reservation("hi") is not None and len(writes(kube)) == 3
        cache.delete_pod(LOW[1])
        placed = await filtered(placement)
        assert placed.node_names == ["n"]
        assert placed.decision is not None
        assert (placed.decision.allocation or "").startswith("GPU-1,")

    asyncio.run(run())


def test_a_refused_eviction_abandons_the_plan_and_the_refusal_is_in_the_answer() -> None:
    async def run() -> None:
        refusal = Unavailable("evict pod ns/b: HTTP 429: Cannot evict pod", status=429)
        kube = api(refuse={"b": refusal}, budgets=True)
        placement, cache, seen = world(kube)
        await filtered(placement)
        assert writes(kube) == [("evict", "b", "b")]
        assert seen == [("attempted", ""), ("refused", "disruption-budget")]
        assert cache.reservation("hi") is None  # the hold is lifted
        again = await filtered(placement)
        assert "preemption: eviction of ns/b refused" in again.failed["n"]
        assert len(writes(kube)) == 1  # not tried again within the retry interval

    asyncio.run(run())


def test_a_victim_already_gone_is_no_refusal() -> None:
    async def run() -> None:
        kube = api(refuse={"b": NotFound("gone", status=404)})
        placement, _, seen = world(kube)
        await filtered(placement)
        assert seen == [("attempted", ""), ("done", "")]

    asyncio.run(run())


def test_a_hold_that_outlives_its_victims_grace_lapses_and_nothing_more_is_evicted() -> None:
    async def run() -> None:
        kube = api()
        placement, cache, _ = world(kube)
        await filtered(placement)
        clock = placement.preempter.clock
        assert isinstance(clock, Clock)
        clock.now = 30 + 60 + 1  # the victim's default grace period and the hold, passed
        assert [r.uid for r in cache.expire()] == ["hi"]
        answer = await filtered(placement)
        assert "have not terminated and the hold on their cards has expired" in answer.failed["n"]
        assert [c[0] for c in writes(kube)].count("evict") == 1

    asyncio.run(run())


def test_placed_pods_and_pods_without_gpus_pass_untouched() -> None:
    placement, _, _ = world(api())
    plain = {"metadata": {"uid": "p", "namespace": "ns", "name": "p"}, "spec": {"containers": []}}
    assert placement.filter(plain, ["n"]) == FilterOutcome(
        PodRef("ns", "p", "p"), node_names=["n"], gpu=False
    )


def test_a_pod_over_its_namespace_quota_preempts_nobody() -> None:
    async def run() -> None:
        kube = api()
        placement, cache, seen = world(kube)
        quota = {
            "metadata": {"namespace": "ns", "name": "gpu"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "20000"}},
        }
        cache.quotas.replace([quota])
        # 16000 MiB used in the namespace (the victims too), so 11000 more never fits it.
        answer = await filtered(placement)
        assert answer.node_names is None
        assert writes(kube) == [] and seen == []

    asyncio.run(run())
