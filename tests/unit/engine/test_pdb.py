"""PodDisruptionBudgets as kube-scheduler's preemption counts them (filterPodsWithPDBViolation)."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.engine.pdb import Budget, Candidate, parse_budget, violations


def budget(
    selector: dict[str, Any] | None,
    allowed: int = 0,
    ns: str = "ns",
    disrupted: tuple[str, ...] = (),
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": "b"},
        "spec": {"selector": selector} if selector is not None else {},
        "status": {"disruptionsAllowed": allowed, "disruptedPods": dict.fromkeys(disrupted, "t")},
    }


def parsed(obj: dict[str, Any]) -> Budget:
    b = parse_budget(obj)
    assert b is not None
    return b


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ({"matchLabels": {"app": "a"}}, {"app": "a", "x": "y"}, True),
        ({"matchLabels": {"app": "a"}}, {"app": "b"}, False),
        # An empty or missing selector matches nothing (policy/v1), unlike a label selector.
        ({}, {"app": "a"}, False),
        (None, {"app": "a"}, False),
        (
            {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]},
            {"app": "b"},
            True,
        ),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {"app": ""}, True),
        ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, {"app": "a"}, False),
        (
            {
                "matchLabels": {"tier": "low"},
                "matchExpressions": [{"key": "app", "operator": "Exists"}],
            },
            {"tier": "low"},
            False,
        ),
    ],
)
def test_selector(selector: dict[str, Any] | None, labels: dict[str, str], matches: bool) -> None:
    assert parsed(budget(selector)).matches(labels) is matches


@pytest.mark.parametrize(
    "selector",
    [
        {"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]},
        {"matchExpressions": [{"key": "app", "operator": "In"}]},  # In needs values
        {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["a"]}]},
        {"matchLabels": "app=a"},
    ],
)
def test_a_selector_that_does_not_convert_is_skipped(selector: dict[str, Any]) -> None:
    assert parse_budget(budget(selector)) is None


def pods(n: int, ns: str = "ns", labels: dict[str, str] | None = None) -> list[Candidate]:
    return [Candidate(f"u{i}", ns, f"p{i}", labels or {"app": "a"}) for i in range(n)]


def test_the_budget_is_spent_by_the_most_important_pods_first() -> None:
    b = parsed(budget({"matchLabels": {"app": "a"}}, allowed=2))
    assert violations(pods(4), [b]) == {"u2", "u3"}


def test_pods_already_disrupted_cost_nothing_and_other_namespaces_do_not_count() -> None:
    b = parsed(budget({"matchLabels": {"app": "a"}}, allowed=1, disrupted=("p0",)))
    assert violations(pods(3), [b]) == {"u2"}
    assert violations(pods(3, ns="other"), [b]) == set()


@given(st.integers(0, 8), st.integers(-2, 8), st.integers(0, 8))
def test_exactly_the_pods_beyond_the_allowance_violate(
    matched: int, allowed: int, other: int
) -> None:
    b = parsed(budget({"matchLabels": {"app": "a"}}, allowed=allowed))
    candidates = pods(matched) + [
        Candidate(f"o{i}", "ns", f"o{i}", {"app": "z"}) for i in range(other)
    ]
    broken = violations(candidates, [b])
    assert broken == {f"u{i}" for i in range(matched) if i >= max(allowed, 0)}
