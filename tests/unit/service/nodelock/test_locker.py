"""What placement and filter pacing read of the binds queued on node locks (issue 33), and a
lock naming the pod being bound (issue 38)."""

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

import pytest

from hami.engine import names
from hami.engine.model import ContainerDevice
from hami.service.nodelock.locker import OWN_LOCK_TRUST
from hami.service.nodelock.wire import encode_node_lock
from tests.builders import gpu_pod
from tests.fakes.bindworld import HERE, NOW, NS, ONE_CARD, POD, UID, world
from tests.fakes.kubeapi import Fault, server_error


async def test_binds_waiting_on_a_lock_make_the_node_busy_and_hold_filters_until_they_pass() -> (
    None
):
    w = world(lock_wait=2.0)
    locker = w.binder.locker
    for name in ("q1", "q2"):
        w.api.add("pods", gpu_pod(name, NS))
        w.cache.reserve(f"uid-{name}", NS, name, HERE, ((ContainerDevice("GPU-1", 100, 0),),), 0)
    assert locker.busy() == {}
    await locker.room(1, 0.0)
    await w.bind(name="q1")
    assert locker.busy() == {HERE: 1}  # its lock is held until the device plugin allocates
    # The held lock is a bind the next one to this node waits out: it counts as one.
    assert not await _passes(locker.room(1, 5.0))
    await locker.room(2, 0.0)
    second = asyncio.ensure_future(w.bind(name="q2"))
    await asyncio.sleep(0.05)
    assert locker.busy() == {HERE: 2}  # and none of THERE
    held = asyncio.ensure_future(locker.room(2, 5.0))  # the lock held and one bind waiting
    await asyncio.sleep(0.05)
    assert not held.done()
    released = w.api.edit(
        "nodes", HERE, lambda n: n["metadata"]["annotations"].pop(names.NODE_LOCK)
    )
    w.cache.upsert_node(released)
    await second
    await asyncio.wait_for(held, 1.0)  # the waiting bind took the lock: filters go on
    await locker.room(2, 0.0)


async def _passes(waiting: Coroutine[Any, Any, None]) -> bool:
    """Whether `waiting` returns before the filter's hold (5 s) would have ended it."""
    task = asyncio.ensure_future(waiting)
    await asyncio.sleep(0.05)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return not task.cancelled()


async def test_a_retry_takes_at_once_the_lock_its_own_unknown_outcome_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """HAMi takes a lock naming the pod being bound as its own; one this process wrote moments
    ago is no reason to wait when it names that very pod."""
    w = world()
    w.api.fail(Fault("bind_pod", error=server_error(), times=3))
    assert (await w.refused()).reason == "unknown-outcome"
    left = w.lock()
    assert left == encode_node_lock(NOW, NS, POD)  # for the device plugin, should it land
    w.cache.reserve(UID, NS, POD, HERE, ONE_CARD, 0)  # kube-scheduler's retry: filter again
    with caplog.at_level(logging.INFO, logger="hami.service.nodelock.locker"):
        await asyncio.wait_for(w.bind(), OWN_LOCK_TRUST / 2)  # a guard: the trust would hold it
    assert w.pod()["spec"]["nodeName"] == HERE
    assert w.lock() == left, "taken as it stood, not written again"
    assert "node lock held, waiting for it" not in caplog.messages


def test_binds_queue_behind_a_held_lock_only_while_it_is_held_for_less_than_their_wait() -> None:
    locker = world().binder.locker
    assert locker.per_node(17.0) == 1  # nothing measured yet: free nodes only
    locker.locks.hold = 0.5
    assert locker.per_node(17.0) == 2  # a lock held and one bind waiting
    locker.locks.hold = 7.5
    assert locker.per_node(17.0) == 2
    assert locker.per_node(12.0) == 1  # the one waiting could run out: free nodes only
