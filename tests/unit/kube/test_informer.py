import random
from typing import Any

import pytest

from hami.kube.informer import (
    RECONNECT_CAP,
    Bookmark,
    Delete,
    Delivered,
    Ignore,
    Reconnect,
    Relist,
    Upsert,
    backoff_delay,
    interpret,
    is_older,
    strip,
)


def pod(uid: str, rv: str, **metadata: Any) -> dict[str, Any]:
    """Only what the informer reads of an object: identity and resourceVersion."""
    return {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": uid, "resourceVersion": rv, **metadata},
    }


GONE = {
    "type": "ERROR",
    "object": {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "too old resource version: 5 (42)",
        "reason": "Expired",
        "code": 410,
    },
}


def test_gone_error_event_relists() -> None:
    assert interpret(GONE, {}) == Relist("too old resource version: 5 (42)")


def test_gone_without_reason_relists() -> None:
    event = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "gone"}}
    assert interpret(event, {}) == Relist("gone")


def test_other_error_event_reconnects() -> None:
    event = {"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "etcd hiccup"}}
    assert interpret(event, {}) == Reconnect("etcd hiccup")


def test_bookmark_advances_resource_version() -> None:
    event = {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "77"}}}
    assert interpret(event, {}) == Bookmark("77")


@pytest.mark.parametrize(
    ("delivered", "rv", "applied"),
    [
        pytest.param({}, "10", True, id="first sight"),
        pytest.param({"u1": "9"}, "10", True, id="newer"),
        pytest.param({"u1": "10"}, "10", False, id="duplicate"),
        pytest.param({"u1": "11"}, "10", False, id="out of order"),
        pytest.param({"u1": "100"}, "99", False, id="numeric, not lexical"),
        pytest.param({"u1": "9"}, "10", True, id="numeric: 10 after 9"),
        pytest.param({"u1": "abc"}, "10", True, id="unparseable: accepted"),
        pytest.param({"u2": "50"}, "10", True, id="other uid"),
    ],
)
@pytest.mark.parametrize("kind", ["ADDED", "MODIFIED"])
def test_stale_updates_are_ignored(
    kind: str, delivered: dict[str, str], rv: str, applied: bool
) -> None:
    seen = {uid: Delivered(v, "ns", "p") for uid, v in delivered.items()}
    step = interpret({"type": kind, "object": pod("u1", rv)}, seen)
    if applied:
        assert step == Upsert(pod("u1", rv), rv)
    else:
        assert isinstance(step, Ignore)


def test_delete_is_always_delivered() -> None:
    step = interpret(
        {"type": "DELETED", "object": pod("u1", "5")}, {"u1": Delivered("9", "ns", "p")}
    )
    assert step == Delete(pod("u1", "5"), "u1", "5")


def test_managed_fields_are_dropped_without_touching_the_event() -> None:
    obj = pod("u1", "3", managedFields=[{"manager": "kubectl"}])
    step = interpret({"type": "ADDED", "object": obj}, {})
    assert isinstance(step, Upsert)
    assert "managedFields" not in step.obj["metadata"]
    assert step.obj["metadata"]["name"] == "p"
    assert "managedFields" in obj["metadata"]


def test_strip_returns_untouched_objects_as_is() -> None:
    obj = pod("u1", "3")
    assert strip(obj) is obj


@pytest.mark.parametrize(
    "event",
    [
        {"type": "ADDED"},
        {"type": "WHATEVER", "object": pod("u1", "1")},
        {"type": "BOOKMARK", "object": {"metadata": {}}},
    ],
)
def test_odd_events_are_ignored(event: dict[str, Any]) -> None:
    assert isinstance(interpret(event, {}), Ignore)


@pytest.mark.parametrize(
    ("a", "b", "older"),
    [("1", "2", True), ("2", "2", True), ("3", "2", False), ("10", "9", False), ("x", "2", False)],
)
def test_is_older(a: str, b: str, older: bool) -> None:
    assert is_older(a, b) is older


def test_backoff_grows_jittered_and_capped() -> None:
    random.seed(7)
    for failures in range(1, 40):
        ceiling = min(RECONNECT_CAP, 0.5 * 2 ** (failures - 1))
        for _ in range(20):
            assert ceiling / 2 <= backoff_delay(failures) <= ceiling
