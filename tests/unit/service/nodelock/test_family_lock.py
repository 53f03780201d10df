"""A family's own node lock (Cambricon's `cambricon.com/dsmlu.lock`, HAMi v2.10's
pkg/device/cambricon LockNode): its format and rules, and binds against the in-memory API
server that take it, wait for it, and give it back."""

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hami.cache.store import ClusterCache
from hami.engine.families.cambricon import FAMILY as CAMBRICON
from hami.engine.families.hygon import HYGON
from hami.engine.model import ContainerDevice
from hami.engine.names import NODE_LOCK
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.kube.errors import KubeError
from hami.kube.events import EventRecorder
from hami.kube.leader import AlwaysLeader
from hami.service.binderrors import BindError, BindFailure
from hami.service.binding import Binder
from hami.service.bindrules import Budget
from hami.service.nodelock.rules import Action, Reason, decide_lock
from hami.service.nodelock.table import NodeLocks
from hami.service.nodelock.wire import decode_node_lock, family_lock, family_locks, lock_keys
from hami.service.placement import Placement
from tests.builders import FAMILIES, family_pod
from tests.fakes.kubeapi import FakeKube, Fault
from tests.families_samples import SAMPLE_ALLOCATABLE

NOW = datetime(2026, 8, 21, 10, 0, 0, 250000, tzinfo=UTC)
KEY = "cambricon.com/dsmlu.lock"
SPEC = family_lock(CAMBRICON.wire)
FORBIDDEN = KubeError("HTTP 403: Forbidden", status=403)  # a Binding refused outright


# --- the format and the rules -----------------------------------------------------------------


def test_cambricons_lock_is_a_bare_time_that_expires_after_two_minutes() -> None:
    assert SPEC is not None
    assert (SPEC.key, SPEC.expiry, SPEC.names_pod) == (KEY, timedelta(minutes=2), False)
    assert SPEC.within() == "2 minutes"  # HAMi: "node %s has been locked within 2 minutes"
    value = SPEC.encode(NOW, "ns", "p")
    assert value == "2026-08-21T10:00:00.250000Z"  # names no pod; Go's RFC 3339 parse reads it
    assert decode_node_lock(value) == (NOW, None, None)
    assert family_lock(HYGON.wire) is None  # Hygon takes HAMi's own lock
    assert lock_keys(families=FAMILIES) == (NODE_LOCK, KEY)


@pytest.mark.parametrize(
    ("existing", "action", "reason"),
    [
        (None, Action.SET, Reason.UNLOCKED),
        ("2026-08-21T09:58:30Z", Action.CONTEND, Reason.UNNAMED),  # 90 s old: held
        ("2026-08-21T09:57:59Z", Action.TAKE_OVER, Reason.EXPIRED),  # past 2 minutes
        ("not a time", Action.TAKE_OVER, Reason.UNREADABLE),  # HAMi fails the bind instead
    ],
)
def test_the_lock_rules_read_a_family_lock_as_hamis_locknode_does(
    existing: str | None, action: Action, reason: Reason
) -> None:
    assert SPEC is not None
    got = decide_lock(existing, NOW, SPEC.expiry, "n", "ns", "p", None)
    assert (got.action, got.reason) == (action, reason)


def test_only_app_containers_devices_take_the_family_lock() -> None:
    mlu = (ContainerDevice("n-cambricon-mlu-0", 0, 100, "MLU", family="MLU"),)
    assert family_locks(((), mlu), families=FAMILIES) == (SPEC,)
    assert family_locks((), families=FAMILIES) == ()
    hygon = (ContainerDevice("DCU-0", 1000, 100, "DCU", family="DCU"),)
    assert family_locks((hygon,), families=FAMILIES) == ()


# --- binds ------------------------------------------------------------------------------------


def mlu_node(**annotations: str) -> dict[str, Any]:
    resources = dict(SAMPLE_ALLOCATABLE["MLU"])
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "annotations": dict(annotations)},
        "status": {"capacity": resources, "allocatable": resources},
    }


def setup(*pods: str, **annotations: str) -> tuple[FakeKube, Binder]:
    api = FakeKube()
    locks = NodeLocks(recheck=0.05, keys=lock_keys(FAMILIES))
    cache = ClusterCache(
        clock=lambda: 0.0, locks=locks, families=FAMILIES, resources=ResourceDefaults()
    )
    cache.upsert_node(api.add("nodes", mlu_node(**annotations)))
    for name in pods:
        pod = api.add("pods", family_pod(name, CAMBRICON))
        cache.upsert_pod(pod)
        assert Placement(cache, Defaults(), ResourceDefaults()).filter(pod, ["n"]).node_names == [
            "n"
        ]
    binder = Binder(
        api,
        cache,
        EventRecorder(api, rate=0),
        now=lambda: NOW,
        locks=locks,
        leadership=AlwaysLeader(),
        budget=Budget(total=3.0, verify=0.2, binding=0.2, write=0.2),
        lock_wait=1.0,
    )
    return api, binder


def node_annotations(api: FakeKube) -> dict[str, str]:
    node = api.get("nodes", "n")
    assert node is not None
    return dict(node["metadata"].get("annotations") or {})


async def test_a_cambricon_bind_takes_cambricons_lock_and_not_hamis() -> None:
    api, binder = setup("p")
    await binder.bind("ns", "p", "uid-p", "n")
    bound = api.get("pods", "p", "ns")
    assert bound is not None and bound["spec"]["nodeName"] == "n"
    assert node_annotations(api) == {KEY: "2026-08-21T10:00:00.250000Z"}


async def test_a_bind_meeting_a_held_lock_waits_for_the_plugin_to_remove_it() -> None:
    held = "2026-08-21T09:59:30Z"  # 30 s old: another pod's Allocate is still to come
    api, binder = setup("p", **{KEY: held})
    bind = asyncio.ensure_future(binder.bind("ns", "p", "uid-p", "n"))
    await asyncio.sleep(0.2)
    assert not bind.done() and node_annotations(api)[KEY] == held
    # The device plugin removes the lock after Allocate, as Cambricon's does (a JSON patch).
    api.edit("nodes", "n", lambda node: node["metadata"]["annotations"].pop(KEY))
    await bind
    assert node_annotations(api)[KEY] == "2026-08-21T10:00:00.250000Z"


async def test_a_bind_that_waited_in_vain_fails_in_hamis_words_and_leaves_the_lock() -> None:
    held = "2026-08-21T09:59:30Z"
    api, binder = setup("p", **{KEY: held})
    with pytest.raises(BindError) as failed:
        await binder.bind("ns", "p", "uid-p", "n")
    assert failed.value.reason is BindFailure.LOCK_CONTENTION
    assert "node n has been locked within 2 minutes: node lock contention" in str(failed.value)
    await asyncio.sleep(0.1)  # the clean-up after the answer
    assert node_annotations(api)[KEY] == held  # someone else's: HAMi's fail() would remove it


async def test_an_expired_lock_is_taken_over() -> None:
    api, binder = setup("p", **{KEY: "2026-08-21T09:57:00Z"})
    await binder.bind("ns", "p", "uid-p", "n")
    assert node_annotations(api)[KEY] == "2026-08-21T10:00:00.250000Z"


async def test_a_failed_bind_gives_its_lock_back() -> None:
    api, binder = setup("p")
    api.fail(Fault("bind_pod", error=FORBIDDEN))
    with pytest.raises(BindError):
        await binder.bind("ns", "p", "uid-p", "n")
    for _ in range(50):
        if KEY not in node_annotations(api):
            break
        await asyncio.sleep(0.02)
    assert KEY not in node_annotations(api)
    writes = [body for method, _, body in api.written("patch_node_annotations")]
    assert writes == [{KEY: "2026-08-21T10:00:00.250000Z"}, {KEY: None}], writes


async def test_a_failed_bind_leaves_a_lock_written_since_by_someone_else() -> None:
    api, binder = setup("p")

    def plugin_then_another(kube: FakeKube) -> None:
        # Meanwhile the lock was removed and taken again (another scheduler's bind).
        kube.edit("nodes", "n", lambda node: node["metadata"]["annotations"].update({KEY: "x"}))

    api.fail(Fault("bind_pod", error=FORBIDDEN, meanwhile=plugin_then_another))
    with pytest.raises(BindError):
        await binder.bind("ns", "p", "uid-p", "n")
    await asyncio.sleep(0.2)
    assert node_annotations(api)[KEY] == "x"
