"""Binds whose outcome is unknown (hami.service.outcomes) against the in-memory API server.

A Binding whose answer was lost while its pod could not be read back must neither blind the
process (its reservation does not count as the watch's lag) nor be guessed at: the pod is
read back in the background until it says what happened. tests/e2e/test_unknown_outcome.py
runs the same on the real control plane.
"""

from hami.cache.reservations import Stage
from hami.service.outcomes import Ended
from tests.fakes.bindworld import HERE, NS, POD, UID, world
from tests.fakes.kubeapi import FakeKube, Fault, lost, server_error


def status_update(api: FakeKube) -> None:
    """kube-scheduler records the failed bind on the pod (a new resourceVersion, unbound)."""
    api.edit("pods", POD, lambda p: p.setdefault("status", {}).update(phase="Pending"), NS)


async def test_the_binding_is_sent_for_the_version_filter_saw() -> None:
    w = world(versioned=True)
    seen = w.pod()["metadata"]["resourceVersion"]
    await w.binder.bind(NS, POD, UID, HERE)
    assert w.sent_for() == [seen] and w.pod()["spec"]["nodeName"] == HERE


async def test_a_pod_changed_since_filter_is_bound_at_the_version_read_back() -> None:
    w = world(versioned=True)
    seen = w.pod()["metadata"]["resourceVersion"]
    status_update(w.api)
    now = w.pod()["metadata"]["resourceVersion"]
    await w.binder.bind(NS, POD, UID, HERE)
    assert w.sent_for() == [seen, now]  # refused as stale once, then sent for the pod read
    assert w.pod()["spec"]["nodeName"] == HERE


async def test_an_unknown_outcome_neither_blinds_nor_is_guessed_at() -> None:
    w = world(versioned=True)
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
    w = world(versioned=True)
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
    w = world(versioned=True)
    w.binder.outcomes.settle = 0.0  # kube-apiserver's request timeout, shortened
    w.api.fail(Fault("bind_pod", error=server_error()), Fault("get_pod", error=server_error()))
    assert (await w.refused()).reason == "unknown-outcome"
    await w.settled()
    assert w.ended == [Ended.SETTLED]
    assert w.cache.reservation(UID) is None and w.lock() is None


async def test_the_watch_ends_it_when_it_shows_the_pod_unbound_at_a_later_version() -> None:
    w = world(versioned=True)
    w.api.fail(Fault("bind_pod", error=server_error()), Fault("get_pod", error=server_error()))
    w.api.fail(Fault("get_pod", error=server_error(), times=1000))
    await w.refused()
    status_update(w.api)
    w.cache.upsert_pod(w.pod())  # the pods watch shows the update
    assert w.cache.reservation(UID) is None


async def test_a_pod_deleted_meanwhile_ends_it() -> None:
    w = world(versioned=True)
    w.api.fail(Fault("bind_pod", error=server_error()), Fault("get_pod", error=server_error()))
    w.api.fail(Fault("get_pod", error=server_error(), times=2))
    await w.refused()
    w.api.remove("pods", POD, NS)
    await w.settled()
    assert w.ended == [Ended.GONE] and w.cache.reservation(UID) is None
