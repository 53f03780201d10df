"""What the load benches report of a run beside its speed: unknown bind outcomes (the metric
read when exported, said absent when not) and whether a refusal was permanent."""

from collections import Counter

from prometheus_client.parser import text_string_to_metric_families

from tests.bench.envelope import throughput_rows
from tests.bench.report import Liveness
from tests.bench.scrape import counted

FAILURES = """\
# TYPE hami_bind_failures_total counter
hami_bind_failures_total{reason="lock-contention"} 3.0
hami_bind_failures_total{reason="unknown-outcome"} 2.0
"""
UNKNOWN = """\
# HELP hami_bind_unknown_outcomes_total Binds whose outcome was unknown, by how each ended
# TYPE hami_bind_unknown_outcomes_total counter
hami_bind_unknown_outcomes_total{ended="landed"} 1.0
hami_bind_unknown_outcomes_total{ended="released"} 4.0
"""
# A labelled counter with no series yet: the family is exported, nothing counted.
UNKNOWN_NONE_YET = """\
# HELP hami_bind_unknown_outcomes_total Binds whose outcome was unknown, by how each ended
# TYPE hami_bind_unknown_outcomes_total counter
"""


def _counted(text: str) -> Counter[str] | None:
    return counted(list(text_string_to_metric_families(text))).unknown_outcomes


def test_unknown_outcomes_are_read_by_how_each_ended_and_none_when_not_exported() -> None:
    assert _counted(FAILURES + UNKNOWN) == Counter({"landed": 1, "released": 4})
    assert _counted(FAILURES + UNKNOWN_NONE_YET) == Counter()
    assert _counted(FAILURES) is None
    sample = counted(list(text_string_to_metric_families(FAILURES)))
    assert sample.bind_failures == Counter({"lock-contention": 3, "unknown-outcome": 2})


def test_the_delta_of_a_run_keeps_the_metric_absent_or_subtracts_it() -> None:
    before = counted(list(text_string_to_metric_families(FAILURES + UNKNOWN_NONE_YET)))
    after = counted(list(text_string_to_metric_families(FAILURES + UNKNOWN)))
    assert after.minus(before).unknown_outcomes == Counter({"landed": 1, "released": 4})
    absent = counted(list(text_string_to_metric_families(FAILURES)))
    assert absent.minus(absent).unknown_outcomes is None


def test_a_refusal_is_permanent_only_with_pods_pending_and_readyz_failing() -> None:
    done = Liveness(pending=0, readyz="503", unknown={}, unknown_failures=0)
    slow = Liveness(pending=5, readyz="200", unknown={}, unknown_failures=0)
    wedged = Liveness(pending=123, readyz="503", unknown=None, unknown_failures=2)
    assert not done.permanent and not slow.permanent and wedged.permanent
    assert "permanent refusal: none (every pod bound)" in done.line()
    assert "5 pods Pending at the deadline with /readyz 200" in slow.line()
    line = wedged.line()
    assert "PERMANENT: 123 pods Pending, /readyz 503" in line
    assert "unknown bind outcomes: 0 (hami_bind_unknown_outcomes_total absent" in line
    assert "bind failures for an unknown outcome 2" in line
    figures = wedged.figures()
    assert figures["unknown_outcome_metric_present"] is False
    assert figures["permanent_refusal"] is True


def test_the_envelope_holds_a_permanent_refusal_to_zero_pods() -> None:
    run = {
        "label": "gpu-1000-binpack",
        "rate": 40.0,
        "failed_binds_per_pod": 0.0,
        "cpu_ms_per_pod": {"hami-serve": 3.0},
        **Liveness(
            pending=123, readyz="503", unknown={"released": 2}, unknown_failures=2
        ).figures(),
    }
    rows = {r.figure: r for r in throughput_rows(100, [run], 100, [])}
    assert rows["100 nodes, gpu-1000-binpack unknown bind outcomes"].value == 2
    stuck = rows["100 nodes, gpu-1000-binpack pods left Pending, /readyz failing"]
    assert stuck.verdict() == "missed by 123"
