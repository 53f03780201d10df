"""The score log's per-second budget: bursts are capped, and what is left out is counted."""

import logging
from collections.abc import Mapping

import pytest

from hami.cache.store import ClusterCache
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.kube.events import EventRecorder, EventType
from hami.runtime.reporting import FilterReporter, LineBudget
from hami.service.placement import Placement
from tests.builders import FAMILIES, gpu_pod, registered_node, t4
from tests.fakes.kubeapi import FakeKube


def test_budget_caps_each_second_and_reports_what_it_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    budget = LineBudget(10, lambda: now[0])
    assert [budget.take(4) for _ in range(4)] == [True, True, False, False]
    assert budget.refused == 8
    now[0] = 1.0
    with caplog.at_level(logging.INFO, logger="hami.scheduler"):
        assert budget.take(10)
    assert [r.lines for r in caplog.records] == [8]  # type: ignore[attr-defined]
    assert not budget.take(1)


class _Recorded(EventRecorder):
    """The events a reporter records, kept instead of posted."""

    def __init__(self) -> None:
        super().__init__(FakeKube())
        self.seen: list[tuple[str, str, str]] = []

    def record(
        self, obj_ref: Mapping[str, str], type_: EventType, reason: str, message: str
    ) -> None:
        self.seen.append((type_, reason, message))


async def test_unregistered_nodes_keep_hamis_wire_reason_and_say_why_in_events() -> None:
    cache = ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([{"metadata": {"name": "cpu-1"}}, {"metadata": {"name": "cpu-2"}}])
    pod = {
        "metadata": {"namespace": "ns", "name": "p", "uid": "u"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    }
    outcome = Placement(cache, Defaults(), ResourceDefaults()).filter(
        pod, ["cpu-1", "cpu-2", "ghost"]
    )
    # The wire: exactly HAMi's reason, which kube-scheduler copies into FailedScheduling.
    assert dict(outcome.failed) == dict.fromkeys(["cpu-1", "cpu-2", "ghost"], "node unregistered")
    events = _Recorded()
    FilterReporter(events)(outcome)
    messages = [m for _, _, m in events.seen]
    assert messages == [
        "3 nodes node unregistered(cpu-1,cpu-2,ghost)",
        "2 nodes unregistered, no hami.io/node-nvidia-register annotation "
        "(is HAMi's device plugin running, and its identity in the chart's "
        "admissionPolicy.devicePluginUsers?)(cpu-1,cpu-2)",
        "1 nodes unregistered, the scheduler's cache has no node of that name(ghost)",
    ]


async def test_a_pod_that_fits_nowhere_gets_one_event_per_reason_and_a_counted_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """HAMi's Events word for word (one per reason type, its nodes by name), and one log line
    counting nodes per reason, however many nodes there are."""
    cache = ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    full = {"GPU-0": 15000, "GPU-1": 15000}
    nodes = [registered_node(n, [t4(0), t4(1)]) for n in ("n-c", "n-a", "n-b")]
    cache.replace_nodes(nodes)
    taken = [
        gpu_pod(
            f"{node}-{card}",
            node=node,
            mem=mem,
            uid=f"{node}-{card}",
            annotations={"hami.io/vgpu-devices-allocated": f"{card},NVIDIA,{mem},0:;"},
            phase="Running",
        )
        for node in ("n-a", "n-c")
        for card, mem in full.items()
    ] + [
        gpu_pod(
            "n-b-0",
            node="n-b",
            mem=15000,
            uid="n-b-0",
            phase="Running",
            annotations={"hami.io/vgpu-devices-allocated": "GPU-0,NVIDIA,15000,0:;"},
        )
    ]
    cache.replace_pods(taken)
    outcome = Placement(cache, Defaults(), ResourceDefaults()).filter(
        gpu_pod("p", gpus=2, mem=1000), ["n-c", "n-a", "n-b"]
    )
    assert outcome.decision is not None and outcome.decision.node is None
    events = _Recorded()
    with caplog.at_level(logging.INFO, logger="hami.scheduler"):
        FilterReporter(events)(outcome)
    assert [m for _, _, m in events.seen] == [
        "1 nodes AllocatedCardsInsufficientRequest(n-b)",
        "3 nodes CardInsufficientMemory(n-a,n-b,n-c)",
    ]
    [line] = [r for r in caplog.records if r.getMessage() == "no node fits"]
    assert line.nodes_by_reason == {  # type: ignore[attr-defined]
        "2/2 CardInsufficientMemory": 2,
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory": 1,
    }


@pytest.mark.parametrize(("verbosity", "card_lines_at"), [(0, logging.DEBUG), (2, logging.INFO)])
async def test_a_placement_logs_one_info_line_and_hamis_card_lines_from_verbosity_2(
    caplog: pytest.LogCaptureFixture, verbosity: int, card_lines_at: int
) -> None:
    """HAMi logs each card's score at klog -v=2: at that verbosity ours are info lines in its
    words; below it they are debug lines, and the one info line carries the scores."""
    cache = ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", [t4(0), t4(1)])])
    outcome = Placement(cache, Defaults(), ResourceDefaults()).filter(gpu_pod("p"), ["n"])
    with caplog.at_level(logging.DEBUG, logger="hami.scheduler"):
        FilterReporter(_Recorded(), verbosity=verbosity)(outcome)
    cards = [r for r in caplog.records if "computer score" in r.msg]
    assert [(r.levelno, r.getMessage()) for r in cards] == [
        (card_lines_at, "device GPU-0 computer score is 0.000000"),
        (card_lines_at, "device GPU-1 computer score is 0.000000"),
    ]
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert info.count("filter chose node") == 1
    [chose] = [r for r in caplog.records if r.getMessage() == "filter chose node"]
    assert chose.card_scores == [{"GPU-0": 0.0, "GPU-1": 0.0}]  # type: ignore[attr-defined]
    assert len(info) == (1 if verbosity < 2 else 4)  # + "card scores" and two card lines
