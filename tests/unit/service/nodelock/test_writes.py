import asyncio
import logging
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hami.engine.codec import CodecError
from hami.kube.errors import Conflict, KubeError, Unavailable
from hami.service.nodelock.rules import (
    GONE,
    Action,
    Decision,
    Holder,
    Reason,
    decide_lock,
    holder_state,
)
from hami.service.nodelock.wire import (
    NodeLockContention,
    decode_node_lock,
    encode_node_lock,
    go_duration,
)
from hami.service.nodelock.writes import Backoff, _retrying, lock_node
from tests.fakes.kubeapi import FakeKube

NOW = datetime(2026, 8, 21, 10, 0, 0, tzinfo=UTC)
FIVE_MIN = timedelta(minutes=5)
NODE = "node-a"


def lock(age: timedelta, owner: str = ",default,gpu-pod") -> str:
    return (NOW - age).strftime("%Y-%m-%dT%H:%M:%SZ") + owner


def unix(age: timedelta) -> int:
    return int((NOW - age).timestamp())


FRESH = timedelta(minutes=1)
OTHERS = lock(FRESH, ",default,other")
OTHERS_EXPIRED = lock(timedelta(minutes=6), ",default,other")
# The holder as our bind leaves it between taking the lock and posting the Binding.
BINDING_HERE = Holder(
    assigned_node=NODE, bind_phase="allocating", bind_time=unix(FRESH - timedelta(seconds=1))
)
# ... and once the Binding is posted, before the device plugin's Allocate.
BOUND_HERE = replace(BINDING_HERE, node_name=NODE)


@pytest.mark.parametrize(
    ("existing", "holder", "action", "reason"),
    [
        pytest.param(None, None, Action.SET, Reason.UNLOCKED, id="unlocked"),
        pytest.param("", None, Action.SET, Reason.UNLOCKED, id="empty value is unlocked"),
        pytest.param(lock(FRESH), None, Action.HELD, Reason.OURS, id="ours"),
        pytest.param(
            lock(timedelta(minutes=6)), None, Action.TAKE_OVER, Reason.EXPIRED, id="ours, expired"
        ),
        pytest.param(OTHERS, None, Action.ASK_HOLDER, Reason.UNKNOWN, id="someone else's: ask"),
        pytest.param(
            OTHERS_EXPIRED, None, Action.ASK_HOLDER, Reason.UNKNOWN, id="expired: ask too"
        ),
        pytest.param(
            lock(FRESH, ",other-ns,gpu-pod"),
            Holder(),
            Action.CONTEND,
            Reason.BINDING,
            id="same name, other namespace",
        ),
        pytest.param(lock(FRESH, ""), None, Action.CONTEND, Reason.UNNAMED, id="legacy bare time"),
        pytest.param(
            lock(timedelta(minutes=6), ""),
            None,
            Action.TAKE_OVER,
            Reason.EXPIRED,
            id="legacy expired",
        ),
        pytest.param("garbage", None, Action.TAKE_OVER, Reason.UNREADABLE, id="unreadable value"),
        pytest.param(
            "2026-08-21T09:59:00+00:00,default,gpu-pod",
            None,
            Action.HELD,
            Reason.OURS,
            id="numeric offset parses",
        ),
        # Reclaimed at once, however fresh the lock:
        pytest.param(OTHERS, GONE, Action.TAKE_OVER, Reason.GONE, id="holder gone"),
        pytest.param(
            OTHERS,
            replace(BOUND_HERE, phase="Succeeded"),
            Action.TAKE_OVER,
            Reason.TERMINAL,
            id="holder succeeded",
        ),
        pytest.param(
            OTHERS,
            Holder(phase="Failed"),
            Action.TAKE_OVER,
            Reason.TERMINAL,
            id="holder failed (kubelet rejected it)",
        ),
        pytest.param(
            OTHERS,
            Holder(node_name="node-b", phase="Running", assigned_node="node-b"),
            Action.TAKE_OVER,
            Reason.BOUND_ELSEWHERE,
            id="holder bound to another node (killed bind, placed again)",
        ),
        pytest.param(
            OTHERS,
            replace(BINDING_HERE, node_name="node-b"),
            Action.TAKE_OVER,
            Reason.BOUND_ELSEWHERE,
            id="bound elsewhere beats stale annotations naming this node",
        ),
        pytest.param(
            OTHERS,
            replace(BOUND_HERE, bind_phase="success"),
            Action.TAKE_OVER,
            Reason.ALLOCATED,
            id="bind-phase success: plugin done, release lost",
        ),
        pytest.param(
            OTHERS,
            replace(BOUND_HERE, bind_phase="failed"),
            Action.TAKE_OVER,
            Reason.ALLOCATED,
            id="bind-phase failed: plugin done",
        ),
        pytest.param(
            OTHERS,
            replace(BOUND_HERE, phase="Running"),
            Action.TAKE_OVER,
            Reason.RUNNING,
            id="running here, bind-phase never written",
        ),
        pytest.param(
            OTHERS,
            replace(BINDING_HERE, assigned_node="node-b", bind_time=unix(timedelta(seconds=10))),
            Action.TAKE_OVER,
            Reason.ASSIGNED_ELSEWHERE,
            id="vgpu-node names another node, written after the lock",
        ),
        pytest.param(
            OTHERS,
            replace(BINDING_HERE, assigned_node="node-b", bind_time=unix(timedelta(minutes=2))),
            Action.CONTEND,
            Reason.BINDING,
            id="vgpu-node elsewhere but written before the lock: stale, bind may be under way",
        ),
        pytest.param(
            OTHERS,
            replace(BINDING_HERE, assigned_node="node-b", bind_time=unix(FRESH)),
            Action.CONTEND,
            Reason.BINDING,
            id="vgpu-node elsewhere, written in the lock's second: order unknown",
        ),
        pytest.param(
            OTHERS,
            replace(BINDING_HERE, assigned_node="node-b", bind_time=None),
            Action.CONTEND,
            Reason.BINDING,
            id="vgpu-node elsewhere without bind-time: order unknown",
        ),
        pytest.param(
            OTHERS,
            Holder(deleting=True),
            Action.TAKE_OVER,
            Reason.DELETED_UNBOUND,
            id="unbound, being deleted, no vgpu-node: can never be bound",
        ),
        pytest.param(
            OTHERS,
            replace(BINDING_HERE, deleting=True),
            Action.TAKE_OVER,
            Reason.DELETED_UNBOUND,
            id="unbound, being deleted, vgpu-node here",
        ),
        # Kept while fresh: the holder may still be allocated here.
        pytest.param(
            OTHERS, Holder(), Action.CONTEND, Reason.BINDING, id="unbound, no vgpu-node yet"
        ),
        pytest.param(
            OTHERS, BINDING_HERE, Action.CONTEND, Reason.BINDING, id="unbound, vgpu-node here"
        ),
        pytest.param(
            OTHERS,
            BOUND_HERE,
            Action.CONTEND,
            Reason.AWAITING_ALLOCATE,
            id="bound here, allocating",
        ),
        pytest.param(
            OTHERS,
            replace(BOUND_HERE, deleting=True),
            Action.CONTEND,
            Reason.AWAITING_ALLOCATE,
            id="bound here, being deleted: kubelet may still call Allocate",
        ),
        pytest.param(
            lock(FIVE_MIN, ",default,other"),
            BINDING_HERE,
            Action.CONTEND,
            Reason.BINDING,
            id="exactly at expiry still held",
        ),
        pytest.param(
            lock(-timedelta(minutes=10), ",default,other"),
            Holder(),
            Action.CONTEND,
            Reason.BINDING,
            id="future time (clock skew) is held",
        ),
        # Nobody is binding it (a scheduler killed after taking the lock): after a grace.
        pytest.param(
            OTHERS,
            replace(BINDING_HERE, being_bound=False),
            Action.TAKE_OVER,
            Reason.ORPHANED,
            id="unbound, no bind under way, lock a minute old",
        ),
        pytest.param(
            lock(timedelta(seconds=5), ",default,other"),
            Holder(being_bound=False),
            Action.CONTEND,
            Reason.BINDING,
            id="unbound, no bind under way, lock 5 s old: grace",
        ),
        pytest.param(
            OTHERS,
            replace(BOUND_HERE, being_bound=False),
            Action.CONTEND,
            Reason.AWAITING_ALLOCATE,
            id="bound here, no bind under way: the plugin may still allocate",
        ),
        # At expiry (HAMi's last resort), except while the plugin may still allocate for it.
        pytest.param(
            OTHERS_EXPIRED,
            BINDING_HERE,
            Action.TAKE_OVER,
            Reason.EXPIRED,
            id="expired, unbound holder allocating here",
        ),
        pytest.param(
            OTHERS_EXPIRED, Holder(), Action.TAKE_OVER, Reason.EXPIRED, id="expired, unbound"
        ),
        pytest.param(
            OTHERS_EXPIRED,
            BOUND_HERE,
            Action.CONTEND,
            Reason.AWAITING_ALLOCATE,
            id="expired, bound here, awaiting Allocate: kept",
        ),
        pytest.param(
            OTHERS_EXPIRED,
            replace(BOUND_HERE, bind_phase="success"),
            Action.TAKE_OVER,
            Reason.ALLOCATED,
            id="expired, bound here, allocated",
        ),
    ],
)
def test_decide_lock(
    existing: str | None, holder: Holder | None, action: Action, reason: Reason
) -> None:
    decision = decide_lock(existing, NOW, FIVE_MIN, NODE, "default", "gpu-pod", holder)
    assert decision == Decision(action, reason)


@pytest.mark.parametrize(
    ("pod", "holder"),
    [
        pytest.param(None, GONE, id="not found"),
        pytest.param({}, Holder(), id="bare pod"),
        pytest.param(
            {
                "metadata": {
                    "deletionTimestamp": "2026-08-21T10:00:00Z",
                    "annotations": {
                        "hami.io/vgpu-node": "node-b",
                        "hami.io/bind-phase": "success",
                        "hami.io/bind-time": "1787306400",
                    },
                },
                "spec": {"nodeName": "node-b"},
                "status": {"phase": "Running"},
            },
            Holder(
                phase="Running",
                node_name="node-b",
                assigned_node="node-b",
                bind_phase="success",
                bind_time=1787306400,
                deleting=True,
            ),
            id="everything set",
        ),
        pytest.param(
            {"metadata": {"annotations": {"hami.io/bind-time": "soon"}}, "status": {}},
            Holder(),
            id="unreadable bind-time",
        ),
    ],
)
def test_holder_state(pod: dict[str, Any] | None, holder: Holder) -> None:
    assert holder_state(pod) == holder


def api_with(lock: str, pods: dict[str, dict[str, Any]]) -> FakeKube:
    """One node locked with `lock`, and the pods of namespace default by name."""
    api = FakeKube()
    api.add("nodes", {"metadata": {"name": NODE, "annotations": {"hami.io/mutex.lock": lock}}})
    for name, pod in pods.items():
        api.add("pods", {**pod, "metadata": {**pod.get("metadata", {}), "name": name}})
    return api


def lock_of(api: FakeKube) -> str:
    node = api.get("nodes", NODE)
    assert node is not None
    return str(node["metadata"]["annotations"].get("hami.io/mutex.lock"))


async def test_take_over_logs_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    bound_elsewhere = {"spec": {"nodeName": "node-b"}, "status": {"phase": "Running"}}
    api = api_with(OTHERS, {"other": bound_elsewhere})
    with caplog.at_level(logging.INFO, logger="hami.service.nodelock.writes"):
        await lock_node(api, NODE, "default", "gpu-pod", now=lambda: NOW)
    assert lock_of(api) == "2026-08-21T10:00:00Z,default,gpu-pod"
    (record,) = [r for r in caplog.records if r.getMessage() == "node lock taken over"]
    assert record.__dict__["reason"] == "holder-bound-elsewhere"
    assert record.__dict__["previous"] == OTHERS


async def test_expired_lock_of_a_pod_awaiting_allocate_is_kept_and_says_why() -> None:
    bound_here = {
        "spec": {"nodeName": NODE},
        "metadata": {"annotations": {"hami.io/bind-phase": "allocating"}},
    }
    api = api_with(OTHERS_EXPIRED, {"other": bound_here})
    with pytest.raises(NodeLockContention) as caught:
        await lock_node(api, NODE, "default", "gpu-pod", now=lambda: NOW)
    message = str(caught.value)
    assert message.startswith(f"node {NODE} has been locked within 5m0s: node lock contention")
    assert "held by pod default/other" in message
    assert "past its 5m0s expiry too" in message
    assert lock_of(api) == OTHERS_EXPIRED


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


def test_node_lock_value() -> None:
    when = datetime(2026, 8, 21, 10, 0, tzinfo=UTC)
    value = encode_node_lock(when, "default", "gpu-pod")
    assert value == "2026-08-21T10:00:00Z,default,gpu-pod"
    assert decode_node_lock(value) == (when, "default", "gpu-pod")
    assert decode_node_lock("2026-08-21T10:00:00Z") == (when, None, None)
    with pytest.raises(CodecError):
        decode_node_lock("yesterday,default,pod")
