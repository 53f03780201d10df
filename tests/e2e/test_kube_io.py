"""hami.kube against the real kube-apiserver: informer, node lock, bind, events, leadership.

Pods made here name a scheduler that does not exist, so nothing but the test binds them.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import orjson
import pytest

from hami.engine.names import NODE_LOCK
from hami.kube import listwatch
from hami.kube.calls import Obj
from hami.kube.client import Kube
from hami.kube.connect import connect
from hami.kube.errors import Conflict, NotFound
from hami.kube.events import EventReason, EventRecorder
from hami.kube.informer import Informer
from hami.kube.leader import LeaseLeadership
from hami.service.nodelock.wire import NodeLockContention, decode_node_lock
from hami.service.nodelock.writes import lock_node, release_node

from .cluster import ControlPlane

pytestmark = pytest.mark.e2e

T = TypeVar("T")
NOBODY = "no-such-scheduler"


def utcnow() -> datetime:
    return datetime.now(UTC)


async def eventually(probe: Callable[[], T | None], what: str, within: float = 10.0) -> T:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        value = probe()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last value {value!r}")
        await asyncio.sleep(0.05)


async def raw(method: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Obj:
    """The JSON body of a generated-client call, for setting the scene."""
    resp = await method(*args, _preload_content=False, **kwargs)
    async with resp:
        assert resp.status < 300, await resp.text()
        parsed: Obj = orjson.loads(await resp.read())
        return parsed


@pytest.fixture
async def client(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Kube]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    # As `hami serve` runs: the admission policy lets only its identity write hami.io state.
    kube = Kube(await connect(str(control_plane.scheduler_kubeconfig)))
    yield kube
    await kube.close()


@pytest.fixture
async def make_node(client: Kube) -> AsyncIterator[Callable[[], Awaitable[str]]]:
    made: list[str] = []

    async def make() -> str:
        name = f"kube-io-{secrets.token_hex(4)}"
        # A custom taint keeps the real scheduler's other pods off these nodes.
        body = {
            "metadata": {"name": name},
            "spec": {"taints": [{"key": "kube-io-test", "effect": "NoSchedule"}]},
        }
        await raw(client.core.create_node, body)
        made.append(name)
        return name

    yield make
    for name in made:
        await raw(client.core.delete_node, name)


@pytest.fixture
def make_pod(client: Kube, namespace: str) -> Callable[..., Awaitable[Obj]]:
    """Creates pods through the client under test (not kubectl), of a scheduler that is not
    running, so that they stay as created."""

    async def make(name: str, **labels: str) -> Obj:
        body = {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "schedulerName": NOBODY,
                "containers": [{"name": "c", "image": "busybox"}],
            },
        }
        return await raw(client.core.create_namespaced_pod, namespace, body)

    return make


async def delete_pod(client: Kube, namespace: str, name: str) -> None:
    await raw(client.core.delete_namespaced_pod, name, namespace, grace_period_seconds=0)


class Recorder:
    """A Sink that keeps what it was told, by name."""

    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.log: list[tuple[str, str]] = []
        self.replaces = 0
        self.versions: list[Obj] = []

    def replace(self, objects: list[Obj]) -> None:
        self.replaces += 1
        self.objects = {o["metadata"]["name"]: o for o in objects}
        self.versions += objects

    def upsert(self, obj: Obj) -> None:
        self.objects[obj["metadata"]["name"]] = obj
        self.log.append(("upsert", obj["metadata"]["name"]))
        self.versions.append(obj)

    def history(self, name: str) -> list[Obj]:
        """Every version of the object delivered, in order."""
        return [o for o in self.versions if o["metadata"]["name"] == name]

    def delete(self, obj: Obj) -> None:
        self.objects.pop(obj["metadata"]["name"], None)
        self.log.append(("delete", obj["metadata"]["name"]))


async def start(informer: Informer) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    task = asyncio.create_task(informer.run(stop))
    await asyncio.wait_for(informer.synced.wait(), 10)
    return stop, task


async def finish(stop: asyncio.Event, task: asyncio.Task[None]) -> None:
    stop.set()
    await asyncio.wait_for(task, 5)


# --- informer ---------------------------------------------------------------------------------


async def test_informer_sees_create_update_delete(
    client: Kube, namespace: str, make_pod: Callable[..., Awaitable[Obj]]
) -> None:
    sink = Recorder()
    informer = Informer(client, "pods", sink, field_selector=f"metadata.namespace={namespace}")
    stop, task = await start(informer)
    assert sink.replaces == 1
    assert sink.objects == {}

    await make_pod("p1")
    created = await eventually(lambda: sink.objects.get("p1"), "p1 to be added")
    assert "managedFields" not in created["metadata"]

    await client.patch_pod_metadata(namespace, "p1", {"note": "x"}, {"tier": "gold"})
    updated = await eventually(
        lambda: sink.objects.get("p1", {}).get("metadata", {}).get("labels", {}).get("tier"),
        "the label to arrive",
    )
    assert updated == "gold"
    assert sink.objects["p1"]["metadata"]["annotations"] == {"note": "x"}

    await delete_pod(client, namespace, "p1")
    await eventually(lambda: ("delete", "p1") in sink.log, "p1 to be deleted")
    assert "p1" not in sink.objects
    assert informer.last_event_monotonic is not None
    await finish(stop, task)


async def test_relist_forgets_objects_deleted_while_not_watching(
    client: Kube, namespace: str, make_pod: Callable[..., Awaitable[Obj]]
) -> None:
    await make_pod("a")
    await make_pod("b")
    sink = Recorder()
    selector = f"metadata.namespace={namespace}"
    stop, task = await start(Informer(client, "pods", sink, field_selector=selector))
    assert set(sink.objects) == {"a", "b"}
    await finish(stop, task)

    await delete_pod(client, namespace, "a")
    stop, task = await start(Informer(client, "pods", sink, field_selector=selector))
    assert set(sink.objects) == {"b"}
    await finish(stop, task)


async def test_a_list_of_several_pages_is_whole_and_watched_on_from_its_version(
    client: Kube,
    namespace: str,
    make_pod: Callable[..., Awaitable[Obj]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pages asked for ahead (hami.kube.listwatch.list_pages) come from one snapshot, in
    order, and the watch goes on from it."""
    monkeypatch.setattr(listwatch, "LIST_PAGE", 2)
    names = {f"p{i}" for i in range(5)}
    for name in sorted(names):
        await make_pod(name)
    sink = Recorder()
    informer = Informer(client, "pods", sink, field_selector=f"metadata.namespace={namespace}")
    stop, task = await start(informer)
    assert sink.replaces == 1
    assert set(sink.objects) == names
    await make_pod("late")
    await eventually(lambda: sink.objects.get("late"), "the pod made after the list")
    await finish(stop, task)


async def test_a_silent_watch_reconnects_without_relisting(
    client: Kube, namespace: str, make_pod: Callable[..., Awaitable[Obj]]
) -> None:
    sink = Recorder()
    informer = Informer(
        client, "pods", sink, field_selector=f"metadata.namespace={namespace}", inactivity=0.3
    )
    stop, task = await start(informer)
    await asyncio.sleep(1.5)  # several inactivity timeouts on an idle namespace
    await make_pod("late")
    await eventually(lambda: sink.objects.get("late"), "the pod made after the stalls")
    assert sink.replaces == 1
    await finish(stop, task)


# --- bind -------------------------------------------------------------------------------------


async def test_a_binding_sets_the_node_and_its_annotations_in_one_update(
    client: Kube,
    namespace: str,
    make_pod: Callable[..., Awaitable[Obj]],
    make_node: Callable[[], Awaitable[str]],
) -> None:
    node, other = await make_node(), await make_node()
    pod = await make_pod("bound")
    uid = pod["metadata"]["uid"]
    allocation = {"hami.io/vgpu-node": node, "hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1,0:;"}
    sink = Recorder()
    informer = Informer(client, "pods", sink, field_selector=f"metadata.namespace={namespace}")
    stop, task = await start(informer)
    await eventually(lambda: sink.objects.get("bound"), "the pod on the watch")

    await client.bind_pod(namespace, "bound", uid, node, allocation, {"hami.io/vgpu-node": node})
    got = await client.get_pod(namespace, "bound")
    assert got is not None
    assert got["spec"]["nodeName"] == node
    assert {k: got["metadata"]["annotations"][k] for k in allocation} == allocation
    # PodTopologyLabelsAdmission (on by default from 1.35) copies the Binding's labels as well.
    assert got["metadata"]["labels"]["hami.io/vgpu-node"] == node
    # No watch event ever shows the pod bound without its allocation, or the reverse.
    await eventually(lambda: sink.objects["bound"]["spec"].get("nodeName"), "the bound pod")
    seen = [
        (
            bool(o["spec"].get("nodeName")),
            "hami.io/vgpu-node" in (o["metadata"].get("annotations") or {}),
        )
        for o in sink.history("bound")
    ]
    assert set(seen) <= {(False, False), (True, True)}, seen
    await finish(stop, task)

    # Once bound, a Binding is refused whatever it carries, to this node or another: a late bind
    # can never replace the allocation of a pod that is already placed.
    late = {"hami.io/vgpu-node": other, "hami.io/vgpu-devices-allocated": "GPU-b,NVIDIA,1,0:;"}
    for target in (node, other):
        with pytest.raises(Conflict, match="already assigned"):
            await client.bind_pod(namespace, "bound", uid, target, late, {})
    after = await client.get_pod(namespace, "bound")
    assert after is not None and after["metadata"]["annotations"] == got["metadata"]["annotations"]
    with pytest.raises(Conflict):
        await client.bind_pod(
            namespace, "bound", "00000000-0000-0000-0000-000000000000", node, {}, {}
        )
    with pytest.raises(NotFound):
        await client.bind_pod(namespace, "no-such-pod", "", node, {}, {})


async def test_a_pod_bound_unlabelled_while_we_were_down_is_labelled_at_start(
    control_plane: ControlPlane,
    client: Kube,
    namespace: str,
    make_pod: Callable[..., Awaitable[Obj]],
    make_node: Callable[[], Awaitable[str]],
) -> None:
    """A pod of ours bound by an API server that drops a Binding's labels (before 1.35) while
    `hami serve` was down reaches it in its first list, usually in the first page, which goes
    to the cache whole: the label mender must hear of it there, not at its next event."""
    node = await make_node()
    pod = await make_pod("unlabelled")
    # Started from this thread, not a worker's: the plane's processes die with the thread that
    # started them (PR_SET_PDEATHSIG), and a worker thread ends with the test's loop.
    control_plane.stop_app()
    try:
        # Bound as a 1.34 API server binds ours: the annotation without the label.
        await client.bind_pod(
            namespace, "unlabelled", pod["metadata"]["uid"], node, {"hami.io/vgpu-node": node}, {}
        )
        got = await client.get_pod(namespace, "unlabelled")
        assert got is not None and "hami.io/vgpu-node" not in got["metadata"].get("labels", {})
    finally:
        control_plane.restart_app()

    async def label() -> str | None:
        got = await client.get_pod(namespace, "unlabelled")
        return None if got is None else got["metadata"].get("labels", {}).get("hami.io/vgpu-node")

    deadline = asyncio.get_running_loop().time() + 30
    while (found := await label()) is None:
        assert asyncio.get_running_loop().time() < deadline, "the pod was never labelled"
        await asyncio.sleep(0.2)
    assert found == node


async def test_reads_of_missing_objects_return_none(client: Kube, namespace: str) -> None:
    assert await client.get_pod(namespace, "nope") is None
    assert await client.get_node(f"nope-{secrets.token_hex(3)}") is None
    assert await client.get_lease(namespace, "nope") is None


async def test_pod_metadata_patch_sets_and_removes(
    client: Kube, namespace: str, make_pod: Callable[..., Awaitable[Obj]]
) -> None:
    await make_pod("meta", keep="yes", drop="yes")
    patched = await client.patch_pod_metadata(
        namespace, "meta", {"hami.io/bind-phase": "allocating"}, {"hami.io/vgpu-node": "n1"}
    )
    assert patched["metadata"]["annotations"] == {"hami.io/bind-phase": "allocating"}
    assert patched["metadata"]["labels"] == {
        "keep": "yes",
        "drop": "yes",
        "hami.io/vgpu-node": "n1",
    }
    patched = await client.patch_pod_metadata(
        namespace, "meta", {"hami.io/bind-phase": None}, {"drop": None}
    )
    assert "annotations" not in patched["metadata"]
    assert patched["metadata"]["labels"] == {"keep": "yes", "hami.io/vgpu-node": "n1"}


async def test_node_patch_with_a_stale_resource_version_conflicts(
    client: Kube, make_node: Callable[[], Awaitable[str]]
) -> None:
    node = await make_node()
    before = await client.get_node(node)
    assert before is not None
    rv = before["metadata"]["resourceVersion"]
    await client.patch_node_annotations(node, {"a": "1"}, rv)
    with pytest.raises(Conflict):
        await client.patch_node_annotations(node, {"a": "2"}, rv)
    after = await client.get_node(node)
    assert after is not None
    assert after["metadata"]["annotations"]["a"] == "1"


# --- node lock --------------------------------------------------------------------------------


async def lock_value(client: Kube, node: str) -> str | None:
    obj = await client.get_node(node)
    assert obj is not None
    value: str | None = (obj["metadata"].get("annotations") or {}).get(NODE_LOCK)
    return value


async def set_lock(client: Kube, node: str, value: str) -> None:
    obj = await client.get_node(node)
    assert obj is not None
    await client.patch_node_annotations(
        node, {NODE_LOCK: value}, obj["metadata"]["resourceVersion"]
    )


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_lock_take_hold_contend_release(
    client: Kube,
    namespace: str,
    make_pod: Callable[..., Awaitable[Obj]],
    make_node: Callable[[], Awaitable[str]],
) -> None:
    node = await make_node()
    await make_pod("first")
    await make_pod("second")

    await lock_node(client, node, namespace, "first", now=utcnow)
    value = await lock_value(client, node)
    assert value is not None
    assert value.endswith(f",{namespace},first")
    since, *holder = decode_node_lock(value)
    assert holder == [namespace, "first"]
    assert abs(since - utcnow()) < timedelta(seconds=30)

    await lock_node(client, node, namespace, "first", now=utcnow)  # already ours
    assert await lock_value(client, node) == value

    with pytest.raises(NodeLockContention) as caught:
        await lock_node(client, node, namespace, "second", now=utcnow)
    assert f"node {node} has been locked within 5m0s: node lock contention" in str(caught.value)
    assert f"{namespace}/first" in str(caught.value)

    await release_node(client, node, namespace, "second")  # not the owner: no-op
    assert await lock_value(client, node) == value
    await release_node(client, node, namespace, "first")
    assert await lock_value(client, node) is None
    await release_node(client, node, namespace, "first")  # nothing left: no-op

    await lock_node(client, node, namespace, "second", now=utcnow)
    assert (await lock_value(client, node) or "").endswith(f",{namespace},second")


async def test_lock_of_a_deleted_pod_is_taken_over(
    client: Kube,
    namespace: str,
    make_pod: Callable[..., Awaitable[Obj]],
    make_node: Callable[[], Awaitable[str]],
) -> None:
    node = await make_node()
    await make_pod("mine")
    await set_lock(client, node, f"{stamp(utcnow())},{namespace},ghost")
    await lock_node(client, node, namespace, "mine", now=utcnow)
    assert (await lock_value(client, node) or "").endswith(f",{namespace},mine")


async def test_lock_of_a_finished_pod_is_taken_over(
    client: Kube,
    namespace: str,
    make_pod: Callable[..., Awaitable[Obj]],
    make_node: Callable[[], Awaitable[str]],
) -> None:
    node = await make_node()
    await make_pod("done")
    await make_pod("mine")
    await raw(
        client.core.patch_namespaced_pod_status, "done", namespace, {"status": {"phase": "Failed"}}
    )
    await set_lock(client, node, f"{stamp(utcnow())},{namespace},done")
    await lock_node(client, node, namespace, "mine", now=utcnow)
    assert (await lock_value(client, node) or "").endswith(f",{namespace},mine")


async def test_expired_lock_is_taken_over_even_from_a_live_pod(
    client: Kube,
    namespace: str,
    make_pod: Callable[..., Awaitable[Obj]],
    make_node: Callable[[], Awaitable[str]],
) -> None:
    node = await make_node()
    await make_pod("slow")
    await make_pod("mine")
    await set_lock(client, node, f"{stamp(utcnow() - timedelta(minutes=6))},{namespace},slow")
    await lock_node(client, node, namespace, "mine", now=utcnow)
    assert (await lock_value(client, node) or "").endswith(f",{namespace},mine")


async def test_legacy_lock_blocks_until_expiry_and_anyone_may_release_it(
    client: Kube,
    namespace: str,
    make_pod: Callable[..., Awaitable[Obj]],
    make_node: Callable[[], Awaitable[str]],
) -> None:
    node = await make_node()
    await make_pod("mine")
    await set_lock(client, node, stamp(utcnow()))
    with pytest.raises(NodeLockContention, match="an unnamed pod"):
        await lock_node(client, node, namespace, "mine", now=utcnow)
    await release_node(client, node, namespace, "mine")
    assert await lock_value(client, node) is None


async def test_concurrent_lockers_get_exactly_one_winner(
    client: Kube,
    namespace: str,
    make_pod: Callable[..., Awaitable[Obj]],
    make_node: Callable[[], Awaitable[str]],
) -> None:
    node = await make_node()
    names = [f"racer-{i}" for i in range(8)]
    for name in names:
        await make_pod(name)
    results = await asyncio.gather(
        *(lock_node(client, node, namespace, name, now=utcnow) for name in names),
        return_exceptions=True,
    )
    # A winner gets the value it wrote; every other call, contention.
    won = [(n, r) for n, r in zip(names, results, strict=True) if isinstance(r, str)]
    assert len(won) == 1
    assert all(isinstance(r, NodeLockContention) for r in results if not isinstance(r, str))
    winner, value = won[0]
    assert await lock_value(client, node) == value
    assert value.endswith(f",{namespace},{winner}")


async def test_locking_a_missing_node_says_so(client: Kube, namespace: str) -> None:
    with pytest.raises(NotFound, match="not found"):
        await lock_node(client, f"nope-{secrets.token_hex(3)}", namespace, "p", now=utcnow)


# --- events -----------------------------------------------------------------------------------


async def test_repeated_events_are_folded_into_one(
    client: Kube, namespace: str, make_pod: Callable[..., Awaitable[Obj]]
) -> None:
    pod = await make_pod("noisy")
    ref = {"namespace": namespace, "name": "noisy", "uid": pod["metadata"]["uid"]}
    recorder = EventRecorder(client, instance="test-replica")
    stop = asyncio.Event()
    task = asyncio.create_task(recorder.run(stop))

    async def events() -> list[Obj]:
        listed = await raw(client.core.list_namespaced_event, namespace)
        items: list[Obj] = listed["items"]
        return items

    for _ in range(3):
        recorder.record(ref, "Warning", EventReason.FILTERING_FAILED, "no node fits")
    await asyncio.sleep(0.5)
    recorder.record(ref, "Warning", EventReason.FILTERING_FAILED, "no node fits")
    recorder.record(ref, "Normal", EventReason.BINDING_SUCCEED, "bound")

    deadline = asyncio.get_running_loop().time() + 10
    while True:
        items = await events()
        counts = sorted((e["reason"], e["count"]) for e in items)
        if counts == [("BindingSucceed", 1), ("FilteringFailed", 4)]:
            break
        assert asyncio.get_running_loop().time() < deadline, counts
        await asyncio.sleep(0.1)
    failed = next(e for e in items if e["reason"] == "FilteringFailed")
    assert failed["type"] == "Warning"
    assert failed["message"] == "no node fits"
    assert failed["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": namespace,
        "name": "noisy",
        "uid": pod["metadata"]["uid"],
    }
    assert failed["source"] == {"component": "hami-scheduler", "host": "test-replica"}
    assert failed["reportingComponent"] == "hami-scheduler"
    assert recorder.dropped == 0
    stop.set()
    await asyncio.wait_for(task, 5)


# --- leadership -------------------------------------------------------------------------------


async def test_leadership_follows_the_lease_watch_and_ends_terms(
    client: Kube, namespace: str
) -> None:
    now = [1000.0]
    leadership = LeaseLeadership(
        client, namespace, "hami-scheduler", "me", grace=2.0, clock=lambda: now[0]
    )

    async def hold(holder: str) -> None:
        lease = await client.get_lease(namespace, "hami-scheduler")
        spec = {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "renewTime": utcnow().strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
        if lease is None:
            body = {"metadata": {"name": "hami-scheduler"}, "spec": spec}
            await raw(client.coordination.create_namespaced_lease, namespace, body)
        else:
            await raw(
                client.coordination.patch_namespaced_lease,
                "hami-scheduler",
                namespace,
                {"spec": spec},
            )

    stop = asyncio.Event()
    task = asyncio.create_task(leadership.run(stop))
    await asyncio.wait_for(leadership.informer.synced.wait(), 10)
    assert (leadership.is_leader, leadership.term, leadership.current()) == (False, 0, None)

    await hold("me_0f3a")
    await eventually(lambda: leadership.is_leader, "the watch to show our kube-scheduler lead")
    assert leadership.term == 1
    # Just taken over: the previous leader's last writes may still land for `grace` seconds.
    assert leadership.current() is None
    now[0] += 2.0
    first = leadership.current()
    assert first is not None and first.active

    await hold("other_77c1")
    await eventually(lambda: not first.active, "the term to end when the Lease changes hands")
    assert (leadership.is_leader, leadership.current()) == (False, None)

    await hold("me_9bd2")
    await eventually(lambda: leadership.is_leader, "the second term")
    now[0] += 2.0
    second = leadership.current()
    assert second is not None and second.number == 2
    # No renewal for two thirds of the lease: the holder's own renewDeadline has passed, and
    # the term ends though no event says so.
    now[0] += 10.5
    await eventually(lambda: not second.active, "the term to end on a stale Lease")
    assert not leadership.is_leader

    await hold("me_9bd2")
    await eventually(lambda: leadership.term == 3, "a renewal to start a third term")
    stop.set()
    await asyncio.wait_for(task, 5)
    assert not leadership.is_leader


async def test_events_queued_at_shutdown_are_flushed(
    client: Kube, namespace: str, make_pod: Callable[..., Awaitable[Obj]]
) -> None:
    pod = await make_pod("last-words")
    recorder = EventRecorder(client, instance="test-replica")
    ref = {"namespace": namespace, "name": "last-words", "uid": pod["metadata"]["uid"]}
    recorder.record(ref, "Normal", EventReason.BINDING_SUCCEED, "bound just before SIGTERM")
    await recorder.flush(5.0)  # run() never started: only the flush can post it
    listed = await raw(client.core.list_namespaced_event, namespace)
    assert [e["message"] for e in listed["items"]] == ["bound just before SIGTERM"]
