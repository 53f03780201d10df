"""Binds under faults, on the real control plane: lost answers, a slow API server, replays,
leader hand-over. Whatever happens, a bound GPU pod carries exactly the cards of its own node.

The faults are injected on loopback: a proxy in front of kube-apiserver for our process
(:mod:`tests.e2e.faultproxy`), and scheduler replicas stopped as the kubelet stops a deleted pod
(:mod:`tests.e2e.replicas`). The node simulator plays kubelet and HAMi's device plugin; what is
checked is what our webhook and scheduler wrote (the allocation annotations, which card, the node
lock) and what the API server holds afterwards, read from a fresh LIST. Values that come from the
simulator are named where they are used (the bind phase `success`, the pod's readiness).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest

from hami.engine.names import NODE_LOCK
from tests import applog
from tests.e2e.binds import POD, allocation, hold_lock, post

from . import invariant
from .cluster import AS_PLUGIN, ControlPlane, FaultyApi, NodeSim
from .kube import Kube, wait_for
from .nodespec import NodeSpec, t4_node
from .prometheus import get
from .replicas import (
    HA_SCHEDULER,
    Replica,
    lease_holder,
    replicas,
    start_replica,
    wait_for_leader,
)

pytestmark = pytest.mark.e2e

BINDING = r"^/api/v1/namespaces/[^/]+/pods/[^/]+/binding$"


def cards_of(node: NodeSpec) -> set[str]:
    return {c.uuid for c in node.cards}


def release_lock(kube: Kube, node: NodeSpec) -> None:
    """What HAMi's device plugin does once the holder is allocated."""
    kube("annotate", *AS_PLUGIN, "node", node.name, f"{NODE_LOCK}-")


# --- one replica ------------------------------------------------------------------------------


def test_a_binding_whose_answer_is_lost_keeps_its_allocation(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    faulty: FaultyApi,
) -> None:
    node = t4_node("lost-answer")
    nodesim(node)
    # kube-apiserver commits the Binding; its answer never reaches our process.
    faulty.set({"method": "POST", "path": BINDING, "action": "drop-response", "times": 1})
    kube.apply(POD.format(name="lost"), namespace)
    kube.wait_ready(namespace, ["lost"], timeout=90)
    assert faulty.acted("drop-response") == [
        f"drop-response POST /api/v1/namespaces/{namespace}/pods/lost/binding"
    ]
    # What our bind wrote is still there, and it is this node's card: the simulated plugin
    # allocated it (bind-phase `success` and Ready are the stand-in's).
    bound_to, cards = allocation(kube, namespace, "lost")
    assert bound_to == node.name and len(cards) == 1 and cards <= cards_of(node)
    assert kube.pod_annotation(namespace, "lost", "hami.io/bind-phase") == "success"
    assert not [e for e in kube.pod_events(namespace, "lost") if e["reason"] == "BindingFailed"]
    assert NODE_LOCK not in (kube.get("node", node.name)["metadata"].get("annotations") or {})
    invariant.consistent(kube, control_plane)


def test_a_retry_takes_at_once_the_lock_its_own_pod_left(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    faulty: FaultyApi,
) -> None:
    """Three Bindings refused (503, not forwarded; each read back unbound): the outcome is
    unknown, so the lock the bind took, naming the pod, is left for the device plugin. HAMi
    treats a lock naming the pod being bound as its own: kube-scheduler's retry of the pod
    takes it without waiting (it waited ~3 s for a lock this process had just written)."""
    node = t4_node("same-pod-lock")
    nodesim(node)
    faulty.set({"method": "POST", "path": BINDING, "action": "refuse", "status": 503, "times": 3})
    kube.apply(POD.format(name="retried"), namespace)
    kube.wait_ready(namespace, ["retried"], timeout=90)
    assert len(faulty.acted("refuse")) == 3
    lines = _lines_about(control_plane.app_log.read_text(errors="replace"), "retried")
    assert '"bind failed"' in lines and "unknown-outcome" in lines, lines
    assert '"pod bound"' in lines, lines
    assert "node lock held, waiting for it" not in lines, lines
    bound_to, cards = allocation(kube, namespace, "retried")
    assert bound_to == node.name and len(cards) == 1 and cards <= cards_of(node)
    wait_for(
        lambda: not invariant.locks_left(kube, [node.name]),
        timeout=30,
        what="the device plugin to release the lock",
    )
    invariant.consistent(kube, control_plane)


def test_a_replayed_filter_and_bind_of_a_bound_pod_change_nothing(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    first, second = t4_node("replay-a"), t4_node("replay-b")
    nodesim(first)
    kube.apply(POD.format(name="placed"), namespace)
    kube.wait_ready(namespace, ["placed"])
    nodesim(second)
    pod = kube.pod(namespace, "placed")
    before = pod["metadata"]["annotations"]

    # kube-scheduler's cache behind ours, or a replay: the pod is bound to replay-a already.
    answer = post(control_plane, "filter", {"Pod": pod, "NodeNames": [second.name]})
    assert answer == {
        "error": f"pod {namespace}/placed is already bound to node {first.name}; "
        "there is nothing to place"
    }, answer
    bind = {
        "PodName": "placed",
        "PodNamespace": namespace,
        "PodUID": pod["metadata"]["uid"],
        "Node": second.name,
    }
    answer = post(control_plane, "bind", bind)
    assert f"is already bound to node {first.name}, not {second.name}" in str(answer["Error"])

    assert kube.pod(namespace, "placed")["metadata"]["annotations"] == before
    assert NODE_LOCK not in (kube.get("node", second.name)["metadata"].get("annotations") or {})
    served = invariant.served(control_plane)
    assert all(served[c].empty for c in cards_of(second) if c in served), served
    invariant.consistent(kube, control_plane)


def test_every_bind_answers_within_the_extender_timeout(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    faulty: FaultyApi,
) -> None:
    node = t4_node("slow-api")
    nodesim(node)
    hold_lock(kube, namespace, node.name)
    # Every write of ours to the node (the lock) and every Binding answers 6 s late.
    faulty.set(
        {"method": "PATCH", "path": f"^/api/v1/nodes/{node.name}$", "action": "delay-response",
         "seconds": 6},
        {"method": "POST", "path": BINDING, "action": "delay-response", "seconds": 6},
    )  # fmt: skip
    created = time.monotonic()
    kube.apply(POD.format(name="waits"), namespace)
    # The holder's Allocate comes late: past what a bind can wait and still post its Binding
    # (and answer) within kube-scheduler's 30 s extender timeout.
    time.sleep(max(0.0, created + 19 - time.monotonic()))
    release_lock(kube, node)
    kube.wait_ready(namespace, ["waits"], timeout=120)

    time.sleep(6)  # klog writes its buffer out every 5 s
    log = (control_plane.run_dir / "kube-scheduler.log").read_text(errors="replace")
    timeouts = [
        line
        for line in log.splitlines()
        if f"{namespace}/waits" in line
        and ("Client.Timeout" in line or "deadline exceeded" in line)
    ]
    assert timeouts == [], "a bind outlived kube-scheduler's extender timeout"
    bound_to, cards = allocation(kube, namespace, "waits")
    assert bound_to == node.name and cards <= cards_of(node)
    invariant.consistent(kube, control_plane)


# --- two replicas, as the chart runs them ------------------------------------------------------


def ha_pod(name: str, memory: int = 1000) -> str:
    return (
        POD.format(name=name)
        .replace("spec:\n", f"spec:\n  schedulerName: {HA_SCHEDULER}\n", 1)
        .replace("nvidia.com/gpumem: 1000", f"nvidia.com/gpumem: {memory}")
    )


def filters(replica: Replica) -> float:
    text = get(replica.metrics_url, timeout=10).decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("hami_filter_duration_seconds_count")
    )


@pytest.fixture
def two_replicas(control_plane: ControlPlane, namespace: str) -> Iterator[list[Replica]]:
    with replicas(control_plane, namespace, "replica-a", "replica-b") as started:
        yield started


def test_a_hand_over_while_the_old_leader_waits_for_a_node_lock(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    two_replicas: list[Replica],
) -> None:
    old, new = two_replicas
    locked, free = t4_node("handover-x"), t4_node("handover-y")
    nodesim(locked, free)
    hold_lock(kube, namespace, locked.name)
    kube("cordon", free.name)  # the old leader's only choice is the locked node
    kube.apply(ha_pod("moved"), namespace)
    wait_for(lambda: filters(old) >= 1, timeout=30, what="the old leader to place the pod")
    time.sleep(1)  # its bind now waits for the holder's Allocate

    # The old leader's pod is deleted: its kube-scheduler stops (and releases the Lease) while
    # its hami serve runs on through the preStop sleep, its bind still waiting.
    kube("uncordon", free.name)
    kube("cordon", locked.name)
    old.scheduler.stop()
    wait_for_leader(control_plane, namespace, new.name)
    wait_for(
        lambda: kube.pod(namespace, "moved")["spec"].get("nodeName"),
        timeout=60,
        what="the new leader to bind the pod",
    )
    kube.wait_ready(namespace, ["moved"], timeout=60)
    placed = kube.pod(namespace, "moved")
    assert placed["spec"]["nodeName"] == free.name
    # The holder is allocated now: the old leader's bind wakes, in a term that has ended.
    release_lock(kube, locked)
    time.sleep(3)

    after = kube.pod(namespace, "moved")
    assert after["metadata"]["annotations"] == placed["metadata"]["annotations"]
    bound_to, cards = allocation(kube, namespace, "moved")
    assert bound_to == free.name and len(cards) == 1 and cards <= cards_of(free)
    assert invariant.locks_left(kube, [locked.name, free.name]) == {}
    # Which replica bound it: the new leader; the old one stopped when its term ended.
    assert '"pod bound"' in _lines_about(new.app.log.read_text(), "moved")
    old_lines = _lines_about(old.app.log.read_text(), "moved")
    assert "stopped leading" in old_lines and '"pod bound"' not in old_lines
    invariant.consistent(kube, control_plane, new.metrics_url)
    assert lease_holder(control_plane, namespace).startswith(new.name + "_")


def test_a_scheduler_pod_deleted_during_a_burst_leaves_every_pod_consistent(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    two_replicas: list[Replica],
) -> None:
    old, new = two_replicas
    # A slow device plugin: every Allocate takes 0.3 s, and binds to a node queue behind it.
    nodes = [
        NodeSpec(n.name, n.cards, n.split, allocate_delay=0.3)
        for n in (t4_node(f"burst-ha-{i}") for i in range(4))
    ]
    nodesim(*nodes)
    count = 80
    manifest = "\n---\n".join(ha_pod(f"b-{i:02d}") for i in range(count))
    kube.apply(manifest, namespace)
    time.sleep(2)
    # Mid-burst, the leader's pod is deleted as a rolling upgrade does: kube-scheduler stops at
    # once, hami serve 10 s later (the chart's preStop sleep).
    old.delete(pre_stop=10)
    names = [f"b-{i:02d}" for i in range(count)]
    kube.wait_ready(namespace, names, timeout=300)

    assert invariant.misplaced(kube, namespace) == []
    assert invariant.overcommitted(kube) == []
    wait_for(
        lambda: not invariant.locks_left(kube, [n.name for n in nodes]),
        timeout=30,
        what="every node lock to be released",
    )
    invariant.consistent(kube, control_plane, new.metrics_url)
    assert lease_holder(control_plane, namespace).startswith(new.name + "_")


def _lines_about(log: str, pod: str) -> str:
    """The messages of `hami serve`'s log records that name the pod, one a line."""
    return "\n".join(json.dumps(r) for r in applog.about(log, pod=pod))


def test_writes_queued_when_the_term_ends_are_never_sent(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    """The old leader talks to kube-apiserver through the fault proxy, one write at a time,
    each answered 2 s late: its binds' writes queue. Its kube-scheduler stops (the term ends);
    of the writes still queued, none reaches kube-apiserver. The proxy forwards only the old
    leader's requests, so its log counts the old leader's writes alone."""
    api = control_plane.start_fault_proxy()
    api.set(
        {"method": "PATCH", "path": r"^/api/v1/nodes/", "action": "delay-response", "seconds": 2},
        {"method": "POST", "path": BINDING, "action": "delay-response", "seconds": 2},
    )
    # Spread: each bind goes to a node of its own, so its lock write queues for the one write
    # slot, not behind another bind's lock on the same node.
    slow = (
        "--kubeconfig", str(api.kubeconfig), "--api-write-limit", "1",
        "--node-scheduler-policy", "spread",
    )  # fmt: skip
    with replicas(control_plane, namespace, "queued-old", app_args=slow) as (old,):
        new = start_replica(control_plane, namespace, "queued-new")
        try:
            nodes = [t4_node(f"queued-{i}") for i in range(4)]
            nodesim(*nodes)
            names = [f"q-{i}" for i in range(8)]
            kube.apply("\n---\n".join(ha_pod(n) for n in names), namespace)
            wait_for(lambda: filters(old) >= 4, timeout=60, what="binds queued on the old leader")
            old.scheduler.stop()
            wait_for(
                lambda: '"lost leadership"' in old.app.log.read_text(errors="replace"),
                timeout=30,
                what="the old leader's term to end",
            )
            sent_by_then = len(api.acted("delay-response"))
            wait_for(
                lambda: _writes_pending(old) == 0,
                timeout=90,
                what="the old leader's write queue to drain",
            )
            # At most the one write in flight when the term ended lands afterwards.
            assert len(api.acted("delay-response")) - sent_by_then <= 1, api.acted()
            kube.wait_ready(namespace, names, timeout=180)
            assert invariant.misplaced(kube, namespace) == []
            assert invariant.overcommitted(kube) == []
            wait_for(
                lambda: not invariant.locks_left(kube, [n.name for n in nodes]),
                timeout=60,
                what="every node lock to be released",
            )
        finally:
            new.scheduler.stop()
            new.app.stop(grace=30)


def _writes_pending(replica: Replica) -> float:
    """Writes the replica has queued for a slot or in flight."""
    text = get(replica.metrics_url, timeout=10).decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(("hami_api_writes_queued ", "hami_api_writes_in_flight "))
    )
