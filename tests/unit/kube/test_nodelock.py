import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from hami.kube.errors import Conflict, KubeError, Unavailable
from hami.kube.nodelock import (
    Action,
    Backoff,
    NodeLockContention,
    _retrying,
    decide_lock,
    go_duration,
    lock_owner,
)

NOW = datetime(2026, 8, 21, 10, 0, 0, tzinfo=UTC)
FIVE_MIN = timedelta(minutes=5)


def lock(age: timedelta, owner: str = ",default,gpu-pod") -> str:
    return (NOW - age).strftime("%Y-%m-%dT%H:%M:%SZ") + owner


@pytest.mark.parametrize(
    ("existing", "holder_exists", "action"),
    [
        pytest.param(None, None, Action.SET, id="unlocked"),
        pytest.param("", None, Action.SET, id="empty value is unlocked"),
        pytest.param(lock(timedelta(minutes=1)), None, Action.HELD, id="ours"),
        pytest.param(lock(timedelta(minutes=6)), None, Action.TAKE_OVER, id="ours but expired"),
        pytest.param(
            lock(timedelta(minutes=1), ",default,other"),
            None,
            Action.ASK_HOLDER,
            id="someone else's: ask",
        ),
        pytest.param(
            lock(timedelta(minutes=1), ",default,other"),
            True,
            Action.CONTEND,
            id="someone else's, holder alive",
        ),
        pytest.param(
            lock(timedelta(minutes=1), ",default,other"),
            False,
            Action.TAKE_OVER,
            id="someone else's, holder gone",
        ),
        pytest.param(
            lock(timedelta(minutes=1), ",other-ns,gpu-pod"),
            True,
            Action.CONTEND,
            id="same name, other namespace",
        ),
        pytest.param(
            lock(timedelta(minutes=5, seconds=1), ",default,other"),
            None,
            Action.TAKE_OVER,
            id="expired: holder not asked",
        ),
        pytest.param(
            lock(timedelta(minutes=5), ",default,other"),
            True,
            Action.CONTEND,
            id="exactly at expiry still held",
        ),
        pytest.param(
            lock(-timedelta(minutes=10), ",default,other"),
            True,
            Action.CONTEND,
            id="future time (clock skew) is held",
        ),
        pytest.param(
            lock(timedelta(minutes=1), ""),
            None,
            Action.CONTEND,
            id="legacy bare time: no holder to ask",
        ),
        pytest.param(lock(timedelta(minutes=6), ""), None, Action.TAKE_OVER, id="legacy expired"),
        pytest.param("garbage", None, Action.TAKE_OVER, id="unreadable value"),
        pytest.param(
            "2026-08-21T09:59:00+00:00,default,gpu-pod",
            None,
            Action.HELD,
            id="numeric offset parses",
        ),
    ],
)
def test_decide_lock(existing: str | None, holder_exists: bool | None, action: Action) -> None:
    assert decide_lock(existing, NOW, FIVE_MIN, "default", "gpu-pod", holder_exists) is action


@pytest.mark.parametrize(
    ("annotations", "owner"),
    [
        ({}, None),
        ({"hami.io/mutex.lock": ""}, None),
        ({"hami.io/mutex.lock": "nonsense"}, None),
        (
            {"hami.io/mutex.lock": "2026-08-21T10:00:00Z,default,gpu-pod"},
            (NOW, "default", "gpu-pod"),
        ),
        ({"hami.io/mutex.lock": "2026-08-21T10:00:00Z"}, (NOW, None, None)),
    ],
)
def test_lock_owner(annotations: dict[str, str], owner: object) -> None:
    assert lock_owner({"metadata": {"annotations": annotations}}) == owner


def test_lock_owner_without_annotations() -> None:
    assert lock_owner({"metadata": {}}) is None
    assert lock_owner({"metadata": {"annotations": None}}) is None


@pytest.mark.parametrize(
    ("d", "text"),
    [
        (timedelta(minutes=5), "5m0s"),
        (timedelta(seconds=30), "30s"),
        (timedelta(minutes=1, seconds=30), "1m30s"),
        (timedelta(hours=1), "1h0m0s"),
        (timedelta(seconds=1.5), "1.5s"),
    ],
)
def test_go_duration(d: timedelta, text: str) -> None:
    assert go_duration(d) == text


FAST = Backoff(steps=5, duration=0.001, factor=2, jitter=0.5)
CONTEXT = {"node": "n1"}


async def test_retries_conflicts_then_gives_up() -> None:
    calls = 0

    async def attempt() -> None:
        nonlocal calls
        calls += 1
        raise Conflict("rv changed", status=409)

    with pytest.raises(Conflict):
        await _retrying(attempt, FAST, CONTEXT)
    assert calls == 5


async def test_retry_succeeds_after_transient_failures() -> None:
    outcomes: list[Exception | None] = [Unavailable("503", status=503), Conflict("409"), None]

    async def attempt() -> str:
        failure = outcomes.pop(0)
        if failure:
            raise failure
        return "locked"

    assert await _retrying(attempt, FAST, CONTEXT) == "locked"
    assert outcomes == []


@pytest.mark.parametrize(
    "error",
    [NodeLockContention("node n1 has been locked within 5m0s"), KubeError("forbidden", status=403)],
)
async def test_contention_and_hard_errors_are_not_retried(error: Exception) -> None:
    calls = 0

    async def attempt() -> None:
        nonlocal calls
        calls += 1
        raise error

    with pytest.raises(type(error)):
        await _retrying(attempt, FAST, CONTEXT)
    assert calls == 1


async def test_retry_after_is_honoured() -> None:
    outcomes: list[Exception | None] = [Unavailable("429", status=429, retry_after=0.05), None]

    async def attempt() -> None:
        failure = outcomes.pop(0)
        if failure:
            raise failure

    loop = asyncio.get_running_loop()
    start = loop.time()
    await _retrying(attempt, FAST, CONTEXT)
    assert loop.time() - start >= 0.05
