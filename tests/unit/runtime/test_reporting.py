"""The score log's per-second budget: bursts are capped, and what is left out is counted."""

import logging
from collections.abc import Mapping

import pytest

from hami.cache.store import ClusterCache
from hami.kube.events import EventRecorder, EventType
from hami.runtime.reporting import FilterReporter, LineBudget
from hami.service.placement import Placement
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
    cache = ClusterCache(clock=lambda: 0.0)
    cache.replace_nodes([{"metadata": {"name": "cpu-1"}}, {"metadata": {"name": "cpu-2"}}])
    pod = {
        "metadata": {"namespace": "ns", "name": "p", "uid": "u"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    }
    outcome = Placement(cache).filter(pod, ["cpu-1", "cpu-2", "ghost"])
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
