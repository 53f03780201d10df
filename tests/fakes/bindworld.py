"""The bind use case wired to the in-memory API server (kubeapi.FakeKube): two registered nodes
of two T4s, one pending pod reserved on one card of HERE, and a Binder over them, for the unit
tests of binds, their outcomes and the node locks they take."""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from hami.cache.store import ClusterCache
from hami.engine import names
from hami.engine.model import ContainerDevice, PodDevices
from hami.engine.requests import ResourceDefaults
from hami.kube.events import EventRecorder
from hami.kube.leader import AlwaysLeader
from hami.service.binderrors import BindError
from hami.service.binding import BeforeBinding, Binder
from hami.service.bindrules import Budget
from hami.service.nodelock.table import NodeLocks
from hami.service.nodelock.wire import lock_keys
from hami.service.outcomes import Ended
from tests.builders import FAMILIES, gpu_pod, registered_node, t4s
from tests.fakes.kubeapi import FakeKube

NOW = datetime(2026, 8, 21, 10, 0, 0, tzinfo=UTC)
NS, POD, UID = "ns", "p", "uid-p"
HERE, THERE = "node-a", "node-b"
ONE_CARD: PodDevices = ((ContainerDevice("GPU-0", 1000, 30),),)
# Short enough that a timeout costs little; the budget is what bounds every bind.
WRITE = 0.2
BUDGET = Budget(total=3.0, verify=WRITE, binding=WRITE, write=WRITE)


@dataclass
class World:
    api: FakeKube
    cache: ClusterCache
    leader: AlwaysLeader
    binder: Binder
    failures: list[str] = field(default_factory=list)
    ended: list[Ended] = field(default_factory=list)

    def lock(self, node: str = HERE) -> str | None:
        found = self.api.get("nodes", node)
        assert found is not None
        value: str | None = (found["metadata"].get("annotations") or {}).get(names.NODE_LOCK)
        return value

    def pod(self, name: str = POD) -> dict[str, Any]:
        found = self.api.get("pods", name, NS)
        assert found is not None
        return found

    async def bind(self, node: str = HERE, name: str = POD) -> None:
        await self.binder.bind(NS, name, f"uid-{name}", node)

    async def refused(self, node: str = HERE, name: str = POD) -> BindError:
        with pytest.raises(BindError) as caught:
            await self.bind(node, name)
        await self.binder.drain(5.0)  # the clean-up after the answer
        return caught.value

    def sent_for(self) -> list[str]:
        """The resourceVersion each Binding was sent for."""
        return [body["resourceVersion"] for _, _, body in self.api.written("bind_pod")]

    async def settled(self) -> None:
        """Until no pod is being read back (the follower's backoff is short at first)."""
        for _ in range(600):
            if not self.binder.outcomes.following():
                return
            await asyncio.sleep(0.05)
        raise AssertionError("still reading the pod back after 30 s")


def world(
    budget: Budget = BUDGET,
    before_binding: Callable[[FakeKube], BeforeBinding] | None = None,
    *,
    versioned: bool = False,
    **binder: Any,
) -> World:
    """The pod reserved on HERE; `versioned`: reserved at the resourceVersion filter saw (the
    pod as stored), else at none; `binder`: the Binder's other arguments."""
    api = FakeKube()
    locks = NodeLocks(recheck=0.05, keys=lock_keys(FAMILIES))
    cache = ClusterCache(
        clock=lambda: 0.0, locks=locks, families=FAMILIES, resources=ResourceDefaults()
    )
    for name in (HERE, THERE):
        cache.upsert_node(api.add("nodes", registered_node(name, t4s(2))))
    stored = api.add("pods", gpu_pod(POD, NS))
    seen = stored["metadata"]["resourceVersion"] if versioned else ""
    cache.reserve(UID, NS, POD, HERE, ONE_CARD, 0, resource_version=seen)
    leader = AlwaysLeader()
    failures: list[str] = []
    ended: list[Ended] = []
    bind = binder_over(
        api,
        cache,
        locks,
        budget=budget,
        leadership=leader,
        on_failure=failures.append,
        on_unknown=ended.append,
        before_binding=before_binding(api) if before_binding else None,
        **binder,
    )
    return World(api, cache, leader, bind, failures, ended)


def binder_over(
    api: FakeKube,
    cache: ClusterCache,
    locks: NodeLocks,
    *,
    now: datetime = NOW,
    budget: Budget = BUDGET,
    leadership: AlwaysLeader | None = None,
    **binder: Any,
) -> Binder:
    """A Binder over `api` and `cache` at `now`, always the leader, its events posted at once;
    `binder`: its other arguments."""
    return Binder(
        api,
        cache,
        EventRecorder(api, rate=0),
        now=lambda: now,
        locks=locks,
        leadership=leadership or AlwaysLeader(),
        budget=budget,
        **binder,
    )
