"""What a bind concludes from the pod read back, and how it spends kube-scheduler's timeout."""

from datetime import timedelta
from typing import Any

import pytest

from hami.service.bindrules import Budget, Found, PodState, go_duration, read_back


def pod(uid: str = "u1", node: str = "", deleting: bool = False) -> dict[str, Any]:
    """Only what the bind rules read of a pod: who it is, its node, whether it is being deleted."""
    metadata: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": uid}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-04T10:00:00Z"
    return {"metadata": metadata, "spec": {"nodeName": node} if node else {}}


@pytest.mark.parametrize(
    ("read", "uid", "state"),
    [
        (pod(node="n1"), "u1", PodState(Found.BOUND_HERE, "n1")),  # the lost answer landed
        (pod(node="n1"), "", PodState(Found.BOUND_HERE, "n1")),
        (pod(node="n2"), "u1", PodState(Found.BOUND_ELSEWHERE, "n2")),  # another bind won
        (pod(), "u1", PodState(Found.UNBOUND)),
        (pod(deleting=True), "u1", PodState(Found.DELETING)),
        # Bound before its deletion began: still bound, to this node or another.
        (pod(node="n1", deleting=True), "u1", PodState(Found.BOUND_HERE, "n1")),
        (None, "u1", PodState(Found.GONE)),
        (pod(uid="u2", node="n1"), "u1", PodState(Found.GONE)),  # a new pod under the old name
    ],
)
def test_read_back(read: dict[str, Any] | None, uid: str, state: PodState) -> None:
    assert read_back(read, uid, "n1") == state


@pytest.mark.parametrize(
    ("timeout", "write", "budget"),
    [
        ("30s", 5.0, Budget(total=27.0, verify=5.0, binding=5.0, write=5.0)),
        ("1m", 5.0, Budget(total=55.0, verify=5.0, binding=5.0, write=5.0)),
        # A short timeout shrinks every share; the answer still leaves before it.
        ("6s", 5.0, Budget(total=5.0, verify=5 / 3, binding=5 / 3, write=5 / 3)),
    ],
)
def test_budget_within_the_extender_timeout(timeout: str, write: float, budget: Budget) -> None:
    got = Budget.within(go_duration(timeout), write)
    assert got == budget
    assert got.lock_wait + got.binding + got.verify == pytest.approx(got.total)
    assert got.total < go_duration(timeout).total_seconds()


def test_budget_refuses_a_timeout_that_leaves_no_time() -> None:
    with pytest.raises(ValueError, match="leaves a bind no time"):
        Budget.within(timedelta(seconds=1), 5.0)
    with pytest.raises(ValueError, match="must be positive"):
        Budget.within(timedelta(0), 5.0)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("1m30s", 90), ("1500ms", 1.5), ("2h", 7200), ("0.5s", 0.5), ("1m0s", 60)],
)
def test_go_duration(text: str, seconds: float) -> None:
    assert go_duration(text).total_seconds() == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "30", "s", "30x", "1..5s", "-3s"])
def test_go_duration_refuses_what_go_would(text: str) -> None:
    with pytest.raises(ValueError, match=r"duration|unit"):
        go_duration(text)
