"""Carrying out a preemption: eviction order, refusals, the hold and what the filter then says.

The API server is played by a small recording double (evictions refused by name); the
real thing is exercised in tests/e2e/test_preemption.py.
"""

import asyncio
from typing import Any

from hami.cache.store import ClusterCache
from hami.kube.errors import KubeError, NotFound, Unavailable
from hami.kube.events import EventRecorder
from hami.service.placement import FilterOutcome, PodRef
from hami.service.preempting import Preempter, PreemptingPlacement
from hami.service.preemption import PodFacts
from tests.unit.service.test_preemption import LOW, node

BUDGET = {
    "metadata": {"namespace": "ns", "name": "keep"},
    "spec": {"selector": {"matchLabels": {"tier": "low"}}},
    "status": {"disruptionsAllowed": 0},
}


class RecordingKube:
    """Answers the three calls preemption makes; `refuse` maps pod names to the error."""

    def __init__(self, refuse: dict[str, KubeError] | None = None, budgets: bool = False) -> None:
        self.refuse = refuse or {}
        self.budgets = budgets
        self.calls: list[tuple[str, str, Any]] = []

    async def list_pod_disruption_budgets(self) -> list[dict[str, Any]]:
        return [BUDGET] if self.budgets else []

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        self.calls.append(("evict", name, uid))
        if name in self.refuse:
            raise self.refuse[name]

    async def patch_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.calls.append(("status", name, status))


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


def world(kube: RecordingKube) -> tuple[PreemptingPlacement, ClusterCache, list[tuple[str, str]]]:
    clock = Clock()
    cache = ClusterCache(clock)
    cache.replace_nodes([node()])
    cache.replace_pods(LOW)
    facts = PodFacts()
    facts.replace(LOW)
    seen: list[tuple[str, str]] = []
    preempter = Preempter(
        kube,  # type: ignore[arg-type]
        cache,
        facts,
        EventRecorder(kube, rate=0),  # type: ignore[arg-type]
        scheduler_name="hami-scheduler",
        hold_seconds=60,
        observe=lambda outcome, reason: seen.append((outcome, reason)),
        clock=clock,
    )
    return PreemptingPlacement(preempter, cache), cache, seen


async def filtered(placement: PreemptingPlacement) -> FilterOutcome:
    outcome = placement.filter(HIGH, ["n"])
    await asyncio.gather(*placement.preempter._tasks)
    return outcome


def test_the_victim_is_evicted_marked_and_the_pod_nominated_then_placed_on_the_held_card() -> None:
    async def run() -> None:
        kube = RecordingKube()
        placement, cache, seen = world(kube)
        assert (await filtered(placement)).node_names is None
        assert [c[:2] for c in kube.calls] == [("evict", "b"), ("status", "b"), ("status", "hi")]
        assert kube.calls[1][2]["conditions"][0]["reason"] == "PreemptionByScheduler"
        assert kube.calls[2][2] == {"nominatedNodeName": "n"}
        assert seen == [("attempted", ""), ("done", "")]
        # Victim still there: the hold stays and the answer says so; nothing more is evicted.
        again = await filtered(placement)
        assert "held for this pod while 1 preempted pod(s) terminate" in again.failed["n"]
        assert cache.reservation("hi") is not None and len(kube.calls) == 3
        cache.delete_pod(LOW[1])
        placed = await filtered(placement)
        assert placed.node_names == ["n"]
        assert placed.decision is not None
        assert (placed.decision.allocation or "").startswith("GPU-1,")

    asyncio.run(run())


def test_a_refused_eviction_abandons_the_plan_and_the_refusal_is_in_the_answer() -> None:
    async def run() -> None:
        refusal = Unavailable("evict pod ns/b: HTTP 429: Cannot evict pod", status=429)
        kube = RecordingKube(refuse={"b": refusal}, budgets=True)
        placement, cache, seen = world(kube)
        await filtered(placement)
        assert kube.calls == [("evict", "b", "b")]
        assert seen == [("attempted", ""), ("refused", "disruption-budget")]
        assert cache.reservation("hi") is None  # the hold is lifted
        again = await filtered(placement)
        assert "preemption: eviction of ns/b refused" in again.failed["n"]
        assert len(kube.calls) == 1  # not tried again within the retry interval

    asyncio.run(run())


def test_a_victim_already_gone_is_no_refusal() -> None:
    async def run() -> None:
        kube = RecordingKube(refuse={"b": NotFound("gone", status=404)})
        placement, _, seen = world(kube)
        await filtered(placement)
        assert seen == [("attempted", ""), ("done", "")]

    asyncio.run(run())


def test_a_hold_that_outlives_its_victims_grace_lapses_and_nothing_more_is_evicted() -> None:
    async def run() -> None:
        kube = RecordingKube()
        placement, cache, _ = world(kube)
        await filtered(placement)
        clock = placement.preempter.clock
        assert isinstance(clock, Clock)
        clock.now = 30 + 60 + 1  # the victim's default grace period and the hold, passed
        assert [r.uid for r in cache.expire()] == ["hi"]
        answer = await filtered(placement)
        assert "have not terminated and the hold on their cards has expired" in answer.failed["n"]
        assert [c[0] for c in kube.calls].count("evict") == 1

    asyncio.run(run())


def test_placed_pods_and_pods_without_gpus_pass_untouched() -> None:
    placement, _, _ = world(RecordingKube())
    plain = {"metadata": {"uid": "p", "namespace": "ns", "name": "p"}, "spec": {"containers": []}}
    assert placement.filter(plain, ["n"]) == FilterOutcome(
        PodRef("ns", "p", "p"), node_names=["n"], gpu=False
    )


def test_a_pod_over_its_namespace_quota_preempts_nobody() -> None:
    async def run() -> None:
        kube = RecordingKube()
        placement, cache, seen = world(kube)
        quota = {
            "metadata": {"namespace": "ns", "name": "gpu"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "20000"}},
        }
        cache.quotas.replace([quota])
        # 16000 MiB used in the namespace (the victims too), so 11000 more never fits it.
        answer = await filtered(placement)
        assert answer.node_names is None
        assert kube.calls == [] and seen == []

    asyncio.run(run())
