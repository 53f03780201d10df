"""The bind use case against the in-memory API server (tests/fakes/kubeapi.py).

The read-back matrix: whatever went wrong with the Binding (409, 5xx, a
timeout, a lost answer), what the bind reports and undoes depends on where the
pod stands when it is read back (bound here, bound elsewhere, unbound, gone),
never on the error alone. tests/e2e/test_bind.py and test_bind_faults.py run
the same rules against the real control plane.
"""

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hami.cache.store import ClusterCache
from hami.engine import names, nvidianames
from hami.engine.injection import CONFIG_ANNOTATION
from hami.engine.model import ContainerDevice, PodDevices
from hami.engine.requests import ResourceDefaults
from hami.kube.errors import NotFound
from hami.kube.events import EventRecorder
from hami.kube.leader import AlwaysLeader
from hami.service.binderrors import BindError
from hami.service.binding import BeforeBinding, Binder
from hami.service.bindrules import Budget, Found
from hami.service.limits import LimitsWriter
from hami.service.nodelock.table import NodeLocks
from hami.service.nodelock.wire import encode_node_lock, lock_keys
from tests.builders import FAMILIES, gpu_pod, registered_node, t4s
from tests.fakes.kubeapi import (
    FakeKube,
    Fault,
    conflict,
    lost,
    server_error,
    throttled,
)

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


def world(
    budget: Budget = BUDGET,
    before_binding: Callable[[FakeKube], BeforeBinding] | None = None,
    **binder: Any,
) -> World:
    api = FakeKube()
    locks = NodeLocks(recheck=0.05, keys=lock_keys(FAMILIES))
    cache = ClusterCache(
        clock=lambda: 0.0, locks=locks, families=FAMILIES, resources=ResourceDefaults()
    )
    for name in (HERE, THERE):
        cache.upsert_node(api.add("nodes", registered_node(name, t4s(2))))
    api.add("pods", gpu_pod(POD, NS))
    cache.reserve(UID, NS, POD, HERE, ONE_CARD, 0)
    leader = AlwaysLeader()
    failures: list[str] = []
    bind = Binder(
        api,
        cache,
        EventRecorder(api, rate=0),
        now=lambda: NOW,
        locks=locks,
        leadership=leader,
        budget=budget,
        on_failure=failures.append,
        before_binding=before_binding(api) if before_binding else None,
        **binder,
    )
    return World(api, cache, leader, bind, failures)


# --- the read-back matrix -------------------------------------------------------------------------


def bound_here(api: FakeKube) -> None:
    api.bind(NS, POD, HERE)  # an earlier attempt of this very bind landed


def bound_elsewhere(api: FakeKube) -> None:
    api.bind(NS, POD, THERE)


def deleted(api: FakeKube) -> None:
    api.remove("pods", POD, NS)


STATES: dict[str, Callable[[FakeKube], None] | None] = {
    "bound here": bound_here,
    "bound elsewhere": bound_elsewhere,
    "unbound": None,
    "gone": deleted,
}
# Each way a Binding can go wrong: (the error, or None for an answer past the request timeout).
FAILURES: dict[str, Callable[[], Fault]] = {
    "409": lambda: Fault("bind_pod", error=conflict()),
    "5xx": lambda: Fault("bind_pod", error=server_error(503)),
    "timeout": lambda: Fault("bind_pod", delay=10 * WRITE),
    "lost answer": lambda: Fault("bind_pod", error=lost()),
}
# What the bind reports, by the pod's state when read back after one failed Binding:
# None is a bind that succeeded (the pod is bound here).
OUTCOME: dict[str, str | None] = {
    "bound here": None,
    "bound elsewhere": "bound-elsewhere",
    "unbound": None,  # sent again, and the second Binding lands
    "gone": "pod-gone",
}


@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("state", STATES)
async def test_a_failed_binding_is_judged_by_the_pod_read_back(state: str, failure: str) -> None:
    w = world()
    fault = FAILURES[failure]()
    fault.meanwhile = STATES[state]
    w.api.fail(fault)
    if OUTCOME[state] is None:
        await w.bind()
        assert w.pod()["spec"]["nodeName"] == HERE
        assert w.failures == []
        # The lock stays for HAMi's device plugin to release after Allocate.
        assert (w.lock() or "").endswith(f",{NS},{POD}")
    else:
        refused = await w.refused()
        assert (refused.reason, w.failures) == (OUTCOME[state], [OUTCOME[state]])
        assert w.lock() is None  # the pod is not bound here: the lock is given back
        if state == "bound elsewhere":
            assert names.ASSIGNED_NODE not in w.pod()["metadata"]["annotations"]


# What the bind reports when every attempt fails and the pod stays unbound: a refusal (409, 429)
# is an api-error and gives the lock back; a Binding that may still commit is unknown-outcome
# and leaves the lock for the device plugin (or the lock rules).
PERSISTENT: dict[str, tuple[Callable[[], Fault], str, bool]] = {
    "409": (lambda: Fault("bind_pod", error=conflict(), times=3), "api-error", False),
    "429": (lambda: Fault("bind_pod", error=throttled(0.01), times=3), "api-error", False),
    "5xx": (lambda: Fault("bind_pod", error=server_error(), times=3), "unknown-outcome", True),
    "timeout": (lambda: Fault("bind_pod", delay=10 * WRITE, times=3), "unknown-outcome", True),
    "lost answer": (lambda: Fault("bind_pod", error=lost(), times=3), "unknown-outcome", True),
}


@pytest.mark.parametrize("failure", PERSISTENT)
async def test_a_binding_that_keeps_failing_on_an_unbound_pod(failure: str) -> None:
    fault, reason, lock_kept = PERSISTENT[failure]
    w = world()
    w.api.fail(fault())
    refused = await w.refused()
    assert refused.reason == reason
    assert len(w.api.written("bind_pod")) == 3
    assert (w.lock() is not None) is lock_kept
    assert "nodeName" not in w.pod()["spec"]


async def test_a_binding_whose_answer_is_lost_after_it_landed_is_a_success(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = world()
    w.api.fail(Fault("bind_pod", error=lost(), lands=True))
    with caplog.at_level(logging.WARNING, logger="hami.service.binding"):
        await w.bind()
    assert w.pod()["metadata"]["annotations"][names.ASSIGNED_NODE] == HERE
    assert len(w.api.written("bind_pod")) == 1  # read back, not sent again
    assert [r.getMessage() for r in caplog.records] == [
        "pod bound, though the Binding's answer was lost"
    ]


async def test_a_binding_that_lands_after_its_timeout_is_a_success() -> None:
    w = world()
    w.api.fail(Fault("bind_pod", delay=10 * WRITE, lands=True))
    await w.bind()
    assert w.pod()["spec"]["nodeName"] == HERE and len(w.api.written("bind_pod")) == 1


async def test_a_binding_refused_with_404_is_a_gone_pod() -> None:
    w = world()
    w.api.fail(Fault("bind_pod", error=NotFound("gone", status=404), meanwhile=deleted))
    assert (await w.refused()).reason == "pod-gone"


async def test_a_pod_that_cannot_be_read_back_is_an_unknown_outcome() -> None:
    w = world()
    w.api.fail(Fault("bind_pod", error=lost()), Fault("get_pod", error=server_error()))
    refused = await w.refused()
    assert refused.reason == "unknown-outcome"
    assert "cannot tell whether the pod was bound" in str(refused)
    assert w.lock() is not None


async def test_the_binding_carries_the_allocation_and_the_lock_names_the_pod() -> None:
    w = world(success_events=True)
    await w.bind()
    pod = w.pod()
    annotations = pod["metadata"]["annotations"]
    assert annotations[names.ASSIGNED_NODE] == HERE
    assert annotations[names.BIND_PHASE] == names.PHASE_ALLOCATING
    assert pod["metadata"]["labels"] == {names.ASSIGNED_NODE: HERE}
    assert w.lock() == encode_node_lock(NOW, NS, POD)
    # The lock first, then the Binding: the device plugin finds the pod through the lock.
    assert [c[0] for c in w.api.calls if c[0] in ("patch_node_annotations", "bind_pod")] == [
        "patch_node_annotations",
        "bind_pod",
    ]


# --- what a bind decides before it writes -----------------------------------------------------------


async def test_a_retried_bind_of_a_bound_pod_takes_no_lock_again() -> None:
    w = world()
    await w.bind()
    w.api.edit("nodes", HERE, lambda n: n["metadata"]["annotations"].pop(names.NODE_LOCK))
    writes = len(w.api.calls)
    await w.bind()  # kube-scheduler retries after a lost answer of ours
    assert w.lock() is None and len(w.api.calls) == writes
    assert (await w.refused(THERE)).reason == "bound-elsewhere"


async def test_a_pod_the_cache_shows_bound_is_not_bound_again() -> None:
    w = world()
    w.api.bind(NS, POD, HERE)
    w.cache.upsert_pod(w.pod())
    await w.bind()
    assert (await w.refused(THERE)).reason == "bound-elsewhere"
    assert w.api.written("bind_pod") == []


async def test_without_a_reservation_the_pod_read_back_decides() -> None:
    w = world()
    w.cache.forget(UID)
    refused = await w.refused()
    assert refused.reason == "no-placement" and "filter chose no node" in str(refused)
    w.api.bind(NS, POD, HERE)
    await w.bind()  # bound by an earlier bind: nothing to do
    assert (await w.refused(THERE)).reason == "bound-elsewhere"
    w.api.remove("pods", POD, NS)
    assert (await w.refused()).reason == "pod-gone"


async def test_a_reservation_on_another_node_is_no_placement() -> None:
    w = world()
    refused = await w.refused(THERE)
    assert refused.reason == "no-placement" and f"filter chose node {HERE}" in str(refused)


async def test_a_pod_asking_for_no_card_is_bound_without_lock_or_allocation() -> None:
    w = world()
    w.api.add("pods", gpu_pod("zero", NS))
    w.api.edit(
        "pods",
        "zero",
        lambda p: p["spec"]["containers"][0]["resources"].update(
            {"limits": {"nvidia.com/gpu": 0, "nvidia.com/gpumem": 1000}}
        ),
        NS,
    )
    await w.bind(name="zero")
    assert w.pod("zero")["spec"]["nodeName"] == HERE
    assert w.lock() is None and names.ASSIGNED_NODE not in w.pod("zero")["metadata"]["annotations"]


async def test_a_card_filled_since_filter_is_refused_and_the_reservation_dropped() -> None:
    w = world()
    other = gpu_pod("other", NS, mem=15000)
    other["metadata"]["annotations"] = {
        names.ASSIGNED_NODE: HERE,
        nvidianames.DEVICES_ALLOCATED: "GPU-0,NVIDIA,15000,0:;",
        names.BIND_PHASE: names.PHASE_SUCCESS,
    }
    other["spec"]["nodeName"] = HERE
    other["status"]["phase"] = "Running"
    w.cache.upsert_pod(w.api.add("pods", other))
    refused = await w.refused()
    assert refused.reason == "card-taken" and w.cache.reservation(UID) is None
    assert w.api.written("patch_node_annotations") == []


async def test_a_node_without_the_handshake_is_bound_with_no_lock() -> None:
    w = world()
    labels = {
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.memory": "15360",
        "nvidia.com/gpu.product": "Tesla-T4",
    }
    gfd = {
        "metadata": {"name": "gfd", "labels": labels},
        "status": {"allocatable": {"nvidia.com/gpu": "1"}},
    }
    w.api.add("nodes", gfd)
    cache = ClusterCache(
        clock=lambda: 0.0, gfd_split=4, families=FAMILIES, resources=ResourceDefaults()
    )
    cache.upsert_node(w.api.get("nodes", "gfd") or {})
    assert not cache.handshake("gfd")
    w.binder.cache = cache
    cache.reserve(UID, NS, POD, "gfd", ((ContainerDevice("gfd-0", 1000, 0),),), 0)
    await w.bind("gfd")
    assert w.pod()["metadata"]["annotations"][names.BIND_PHASE] == names.PHASE_SUCCESS
    assert w.lock("gfd") is None


# --- the term, the budget and concurrent binds ------------------------------------------------------


async def test_a_replica_that_does_not_lead_binds_nothing() -> None:
    w = world()
    w.binder.leadership = _NotLeading()
    assert (await w.refused()).reason == "not-leader"
    assert w.api.written("bind_pod") == []


async def test_a_term_that_ends_during_the_lock_write_writes_no_binding() -> None:
    w = world()
    term = w.leader.current()
    assert term is not None
    w.api.fail(Fault("patch_node_annotations", lands=True, meanwhile=lambda _: term.end()))
    refused = await w.refused()
    assert refused.reason == "not-leader"
    assert w.api.written("bind_pod") == []
    # The lock it took is given back whatever the term: left behind it would block the node.
    assert w.lock() is None


async def test_a_term_that_ends_between_attempts_stops_the_retries() -> None:
    w = world()
    term = w.leader.current()
    assert term is not None
    w.api.fail(Fault("bind_pod", error=conflict(), meanwhile=lambda _: term.end()))
    assert (await w.refused()).reason == "not-leader"
    assert len(w.api.written("bind_pod")) == 1


async def test_a_slow_lock_write_runs_the_bind_out_of_time() -> None:
    w = world(budget=Budget(total=0.5, verify=0.1, binding=0.1, write=1.0))
    w.api.fail(Fault("patch_node_annotations", delay=5.0))
    refused = await w.refused()
    assert refused.reason == "deadline" and "extender timeout" in str(refused)


async def test_a_second_bind_of_the_same_pod_waits_for_the_first() -> None:
    w = world()
    w.api.fail(Fault("bind_pod", delay=0.1, lands=True))
    await asyncio.gather(w.bind(), w.bind())
    assert len(w.api.written("bind_pod")) == 1


async def test_a_second_bind_that_cannot_wait_for_the_first_is_refused() -> None:
    w = world()
    w.api.fail(Fault("bind_pod", delay=1.0, lands=True))
    first = asyncio.ensure_future(w.bind())
    await asyncio.sleep(0.05)
    w.binder.budget = Budget(total=0.1, verify=0.01, binding=0.01, write=WRITE)
    refused = await w.refused()
    assert refused.reason == "deadline" and "still under way" in str(refused)
    w.binder.budget = BUDGET
    await first
    assert w.binder.binding(NS, POD, HERE) is False
    assert await w.binder.drain(1.0) == 0


async def test_a_bind_cut_short_by_shutdown_still_answers() -> None:
    w = world()
    w.api.fail(Fault("bind_pod", delay=5.0))
    answer = asyncio.ensure_future(w.bind())
    await asyncio.sleep(0.05)
    assert w.binder.binding(NS, POD, HERE)
    for flight in list(w.binder._flights.values()):
        flight.cancel()
    with pytest.raises(BindError, match="cut short"):
        await answer


async def test_an_unexpected_failure_is_answered_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = world()
    w.api.fail(Fault("get_pod", error=RuntimeError("bug")))  # type: ignore[arg-type]
    w.cache.forget(UID)
    with caplog.at_level(logging.ERROR, logger="hami.service.binding"):
        refused = await w.refused()
    assert refused.reason == "api-error" and "bug" in str(refused)
    assert [r.getMessage() for r in caplog.records] == ["bind failed unexpectedly"]


# --- the node lock, as a bind meets it ------------------------------------------------------------


def other_lock(w: World, holder: dict[str, Any], node: str = HERE) -> None:
    """Another pod's lock on `node`, as the API server and the watch show it."""
    w.api.add("pods", holder)
    value = encode_node_lock(NOW, NS, holder["metadata"]["name"])
    w.cache.upsert_node(
        w.api.edit(
            "nodes", node, lambda n: n["metadata"]["annotations"].update({names.NODE_LOCK: value})
        )
    )


async def test_a_lock_held_for_a_pod_awaiting_allocate_is_contention() -> None:
    w = world(lock_wait=0.2)
    holder = gpu_pod("holder", NS)
    holder["spec"]["nodeName"] = HERE
    other_lock(w, holder)
    refused = await w.refused()
    assert refused.reason == "lock-contention" and "held by pod ns/holder" in str(refused)
    assert w.lock() == encode_node_lock(NOW, NS, "holder")  # not ours: left alone
    assert w.api.written("bind_pod") == []


async def test_a_bind_waits_for_the_holder_to_let_go() -> None:
    w = world(lock_wait=2.0)
    holder = gpu_pod("holder", NS)
    holder["spec"]["nodeName"] = HERE
    other_lock(w, holder)

    async def allocate() -> None:  # the device plugin, moments later
        await asyncio.sleep(0.1)
        released = w.api.edit(
            "nodes", HERE, lambda n: n["metadata"]["annotations"].pop(names.NODE_LOCK)
        )
        w.cache.upsert_node(released)  # the watch shows it

    await asyncio.gather(w.bind(), allocate())
    assert w.lock() == encode_node_lock(NOW, NS, POD)


async def test_an_orphaned_lock_is_taken_over_after_its_grace() -> None:
    w = world(lock_wait=0.1)
    # A scheduler killed between its lock write and its Binding: no bind of the holder is under way.
    other_lock(w, gpu_pod("orphan", NS))
    w.binder.now = w.binder.locker.now = lambda: NOW + timedelta(seconds=5)
    assert (await w.refused()).reason == "lock-contention"  # within the grace: it may be posting
    later = NOW + timedelta(seconds=30)
    w.binder.now = w.binder.locker.now = lambda: later
    await w.bind()
    assert w.lock() == encode_node_lock(later, NS, POD)


async def test_a_lock_write_that_lands_after_the_wait_ran_out_is_given_back() -> None:
    w = world(lock_wait=0.15)
    later = NOW + timedelta(seconds=5)
    w.binder.now = w.binder.locker.now = lambda: later
    # Being bound elsewhere for all we know (within the orphan grace): the first attempt waits.
    other_lock(w, gpu_pod("holder", NS))
    w.api.fail(
        Fault("get_node"),  # the first attempt's read, as it is
        # The holder is deleted before the next attempt, which takes the lock over: its write
        # lands, its answer comes after the wait has run out.
        Fault("get_node", meanwhile=lambda api: api.remove("pods", "holder", NS)),
        Fault("patch_node_annotations", lands=True, delay=10),
    )
    refused = await w.refused()
    assert refused.reason == "lock-contention"
    ours = {names.NODE_LOCK: encode_node_lock(later, NS, POD)}
    # The watch still showed the holder's lock: ours is released all the same.
    assert [body for _, _, body in w.api.landed if body] == [ours, {names.NODE_LOCK: None}]
    assert w.lock() is None


async def test_binds_to_one_node_take_its_lock_in_turn() -> None:
    w = world(lock_wait=2.0)
    for name in ("q1", "q2"):
        w.api.add("pods", gpu_pod(name, NS))
        w.cache.reserve(f"uid-{name}", NS, name, HERE, ((ContainerDevice("GPU-1", 100, 0),),), 0)
    first = asyncio.ensure_future(w.bind(name="q1"))
    await asyncio.sleep(0.02)
    second = asyncio.ensure_future(w.bind(name="q2"))
    await first
    assert w.lock() == encode_node_lock(NOW, NS, "q1")
    await asyncio.sleep(0.1)
    assert not second.done()  # q1's lock is fresh and ours: q2 waits for its release
    released = w.api.edit(
        "nodes", HERE, lambda n: n["metadata"]["annotations"].pop(names.NODE_LOCK)
    )
    w.cache.upsert_node(released)
    await second
    assert w.lock() == encode_node_lock(NOW, NS, "q2")


async def test_a_lock_write_that_keeps_conflicting_fails_the_bind() -> None:
    w = world()
    w.api.fail(Fault("patch_node_annotations", error=conflict(), times=10))
    refused = await w.refused()
    # The node lock's own retries (client-go's backoff) gave up: the 409 is the answer.
    assert refused.reason == "api-error" and "409" in str(refused)
    assert len(w.api.written("patch_node_annotations")) == 5
    assert w.api.written("bind_pod") == []


async def test_a_lock_give_back_that_fails_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    w = world()

    def elsewhere_and_node_unreadable(api: FakeKube) -> None:
        bound_elsewhere(api)
        api.fail(Fault("get_node", error=server_error(), times=10))

    w.api.fail(Fault("bind_pod", error=conflict(), meanwhile=elsewhere_and_node_unreadable))
    with caplog.at_level(logging.WARNING, logger="hami.service.nodelock.locker"):
        assert (await w.refused()).reason == "bound-elsewhere"
    assert [r.getMessage() for r in caplog.records if r.name == "hami.service.nodelock.locker"] == [
        "node lock not released"
    ]


# --- standalone mode's limits, written between the lock and the Binding --------------------------------


async def test_limits_are_written_before_the_binding_and_replace_a_stale_copy() -> None:
    w = world(before_binding=lambda api: LimitsWriter(api, FAMILIES))
    w.api.edit(
        "pods",
        POD,
        lambda p: p["metadata"]["annotations"].update({CONFIG_ANNOTATION: "p-limits"}),
        NS,
    )
    await w.bind()
    config = w.api.get("configmaps", "p-limits", NS)
    assert config is not None and config["metadata"]["ownerReferences"][0]["uid"] == UID
    # A retry after a lost answer finds its own ConfigMap and replaces it.
    writer = LimitsWriter(w.api, families=FAMILIES)
    await writer(NS, POD, UID, ONE_CARD)
    assert [c[0] for c in w.api.calls if "configmap" in c[0]][-2:] == [
        "get_configmap",
        "replace_configmap",
    ]


async def test_limits_never_overwrite_someone_elses_config_map() -> None:
    w = world(before_binding=lambda api: LimitsWriter(api, FAMILIES))
    w.api.edit(
        "pods", POD, lambda p: p["metadata"]["annotations"].update({CONFIG_ANNOTATION: "taken"}), NS
    )
    w.api.add("configmaps", {"metadata": {"name": "taken", "namespace": NS}, "data": {}})
    refused = await w.refused()
    assert refused.reason == "api-error" and "belongs to another object" in str(refused)
    assert w.api.written("bind_pod") == [] and w.lock() is None


async def test_limits_of_a_pod_admitted_before_standalone_mode_are_the_plugins() -> None:
    w = world(before_binding=lambda api: LimitsWriter(api, FAMILIES))
    await w.bind()
    assert w.api.written("create_configmap") == []


async def test_limits_of_a_pod_gone_before_they_are_written() -> None:
    api = FakeKube()
    with pytest.raises(BindError, match="disappeared"):
        await LimitsWriter(api, families=FAMILIES)(NS, POD, UID, ONE_CARD)


class _NotLeading:
    is_leader = False
    term = 0

    def current(self) -> None:
        return None

    async def serving(self, within: float) -> None:
        return None

    async def run(self, stop: asyncio.Event) -> None:
        await stop.wait()


def test_every_read_back_state_is_in_the_matrix() -> None:
    # Deleting is "gone" to a bind: the API server refuses to bind a pod being deleted.
    assert len(STATES) == len(Found) - 1 == len(OUTCOME)
