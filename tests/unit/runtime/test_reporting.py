"""The score log's per-second budget: bursts are capped, and what is left out is counted."""

import logging

import pytest

from hami.runtime.reporting import LineBudget


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
