"""Binds whose outcome is unknown (hami.service.outcomes) against the in-memory API server.

A Binding whose answer was lost while its pod could not be read back must neither blind the
process (its reservation does not count as the watch's lag) nor be guessed at: the pod is
read back in the background until it says what happened. tests/e2e/test_unknown_outcome.py
runs the same on the real control plane.
"""

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from hami.cache.reservations import Stage
from hami.cache.store import ClusterCache
from hami.engine import names
from hami.engine.model import ContainerDevice, PodDevices
from hami.engine.requests import ResourceDefaults
from hami.kube.events import EventRecorder
from hami.kube.leader import AlwaysLeader
from hami.service.binderrors import BindError
from hami.service.binding import Binder
from hami.service.bindrules import Budget
from hami.service.nodelock.table import NodeLocks
from hami.service.nodelock.wire import lock_keys
from hami.service.outcomes import Ended
from tests.builders import FAMILIES, gpu_pod, registered_node, t4s
from tests.fakes.kubeapi import FakeKube, Fault, lost, server_error

NS, POD, UID, NODE = "ns", "p", "uid-p", "node-a"
ONE_CARD: PodDevices = ((ContainerDevice("GPU-0", 1000, 30),),)
WRITE = 0.2
BUDGET = Budget(total=3.0, verify=WRITE, binding=WRITE, write=WRITE)


@dataclass
class World:
    api: FakeKube
    cache: ClusterCache
    binder: Binder
    ended: list[Ended] = field(default_factory=list)

    def pod(self) -> dict[str, Any]:
        found = self.api.get("pods", POD, NS)
        assert found is not None
        return found

    def lock(self) -> str | None:
        node = self.api.get("nodes", NODE)
        assert node is not None
        value: str | None = (node["metadata"].get("annotations") or {}).get(names.NODE_LOCK)
        return value

    def sent_for(self) -> list[str]:
        """The resourceVersion each Binding was sent for."""
        return [body["resourceVersion"] for _, _, body in self.api.written("bind_pod")]

    async def refused(self) -> BindError:
        with pytest.raises(BindError) as caught:
            await self.binder.bind(NS, POD, UID, NODE)
        await self.binder.drain(5.0)
        return caught.value

    async def settled(self) -> None:
        """Until no pod is being read back (the follower's backoff is short at first)."""
        for _ in range(600):
            if not self.binder.outcomes.following():
                return
            await asyncio.sleep(0.05)
        raise AssertionError("still reading the pod back after 30 s")


def world(filter_saw: str | None = None) -> World:
    """A pod reserved on one card of NODE, as filter saw it at `filter_saw` (default: as
    stored)."""
    api = FakeKube()
    locks = NodeLocks(recheck=0.05, keys=lock_keys(FAMILIES))
    cache = ClusterCache(
        clock=lambda: 0.0, locks=locks, families=FAMILIES, resources=ResourceDefaults()
    )
    cache.upsert_node(api.add("nodes", registered_node(NODE, t4s(2))))
    stored = api.add("pods", gpu_pod(POD, NS))
    rv = stored["metadata"]["resourceVersion"] if filter_saw is None else filter_saw
    cache.reserve(UID, NS, POD, NODE, ONE_CARD, 0, resource_version=rv)
    ended: list[Ended] = []
    binder = Binder(
        api,
        cache,
        EventRecorder(api, rate=0),
        now=lambda: datetime(2026, 12, 6, tzinfo=UTC),
        locks=locks,
        leadership=AlwaysLeader(),
        budget=BUDGET,
        on_unknown=ended.append,
    )
    return World(api, cache, binder, ended)


def status_update(api: FakeKube) -> None:
    """kube-scheduler records the failed bind on the pod (a new resourceVersion, unbound)."""
    api.edit("pods", POD, lambda p: p.setdefault("status", {}).update(phase="Pending"), NS)


async def test_the_binding_is_sent_for_the_version_filter_saw() -> None:
    w = world()
    seen = w.pod()["metadata"]["resourceVersion"]
    await w.binder.bind(NS, POD, UID, NODE)
    assert w.sent_for() == [seen] and w.pod()["spec"]["nodeName"] == NODE


async def test_a_pod_changed_since_filter_is_bound_at_the_version_read_back() -> None:
    w = world()
    seen = w.pod()["metadata"]["resourceVersion"]
    status_update(w.api)
    now = w.pod()["metadata"]["resourceVersion"]
    await w.binder.bind(NS, POD, UID, NODE)
    assert w.sent_for() == [seen, now]  # refused as stale once, then sent for the pod read
    assert w.pod()["spec"]["nodeName"] == NODE


async def test_an_unknown_outcome_neither_blinds_nor_is_guessed_at() -> None:
    w = world()
    # Every Binding unanswered and the read-back failing: nobody can tell what happened.
    w.api.fail(Fault("bind_pod", error=server_error()), Fault("get_pod", error=server_error()))
    w.api.fail(Fault("get_pod", error=server_error(), times=3))
    assert (await w.refused()).reason == "unknown-outcome"
    res = w.cache.reservation(UID)
    assert res is not None and res.stage is Stage.UNKNOWN  # its card still counted
    assert w.cache.binds.unconfirmed_since() is None  # and no lag: the process is not blind
    assert w.lock() is not None and w.binder.outcomes.following() == 1
    # kube-scheduler records the failure on the pod: the Binding can no longer land.
    status_update(w.api)
    await w.settled()
    assert w.ended == [Ended.OUTLIVED]
    assert w.cache.reservation(UID) is None and w.lock() is None


async def test_an_unknown_outcome_that_landed_is_confirmed_by_the_watch() -> None:
    w = world()
    w.api.fail(Fault("bind_pod", error=lost(), lands=True), Fault("get_pod", error=server_error()))
    assert (await w.refused()).reason == "unknown-outcome"
    await w.settled()
    assert w.ended == [Ended.LANDED]
    res = w.cache.reservation(UID)
    assert res is not None and res.stage is Stage.LANDED
    assert w.cache.binds.unconfirmed_since() is not None  # now the watch owes it
    assert w.lock() is not None  # the device plugin's to release
    w.cache.upsert_pod(w.pod())
    assert w.cache.reservation(UID) is None and w.cache.allocation(UID) is not None


async def test_an_unchanged_unbound_pod_ends_it_once_the_api_server_cannot_land_it() -> None:
    w = world()
    w.binder.outcomes.settle = 0.0  # kube-apiserver's request timeout, shortened
    w.api.fail(Fault("bind_pod", error=server_error()), Fault("get_pod", error=server_error()))
    assert (await w.refused()).reason == "unknown-outcome"
    await w.settled()
    assert w.ended == [Ended.SETTLED]
    assert w.cache.reservation(UID) is None and w.lock() is None


async def test_the_watch_ends_it_when_it_shows_the_pod_unbound_at_a_later_version() -> None:
    w = world()
    w.api.fail(Fault("bind_pod", error=server_error()), Fault("get_pod", error=server_error()))
    w.api.fail(Fault("get_pod", error=server_error(), times=1000))
    await w.refused()
    status_update(w.api)
    w.cache.upsert_pod(w.pod())  # the pods watch shows the update
    assert w.cache.reservation(UID) is None


async def test_a_pod_deleted_meanwhile_ends_it() -> None:
    w = world()
    w.api.fail(Fault("bind_pod", error=server_error()), Fault("get_pod", error=server_error()))
    w.api.fail(Fault("get_pod", error=server_error(), times=2))
    await w.refused()
    w.api.remove("pods", POD, NS)
    await w.settled()
    assert w.ended == [Ended.GONE] and w.cache.reservation(UID) is None
