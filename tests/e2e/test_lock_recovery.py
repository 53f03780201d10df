"""A node lock whose holder can no longer be allocated on that node is reclaimed at once.

`hami serve` killed between a bind's allocation patch and its Binding leaves the node lock on
node A; kube-scheduler places the pod again, on node B, where it runs, and A used to stay
blocked for the whole 5-minute expiry. These tests build such leftovers by hand and show that a
GPU pod placed on A binds at once (one bind, no BindingFailed) instead of waiting.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta

import pytest

from tests import applog
from tests.builders import gpu_manifest

from .cluster import AS_SCHEDULER, ControlPlane, NodeSim
from .kube import Kube, wait_for
from .nodespec import t4_node

pytestmark = pytest.mark.e2e

LOCK = "hami.io/mutex.lock"
# Well under the 5-minute expiry, and over the bind's 10 s wait for a contended lock.
PROMPTLY = 15


def forge_hami_annotations(
    kube: Kube, kind: str, name: str, annotations: Mapping[str, str], namespace: str | None = None
) -> None:
    """Write what HAMi's scheduler or device plugin would have written.

    The cluster's admission policy lets only the scheduler (and the device plugin) write
    `hami.io/*` scheduling state, so this acts as the scheduler.
    """
    ns = ["-n", namespace] if namespace else []
    values = (f"{k}={v}" for k, v in annotations.items())
    kube("annotate", *AS_SCHEDULER, "--overwrite", kind, name, *values, *ns)


def lock_value(namespace: str, pod: str, age: timedelta) -> str:
    return f"{(datetime.now(UTC) - age).strftime('%Y-%m-%dT%H:%M:%SZ')},{namespace},{pod}"


def holder_pod(name: str, node: str | None = None, finalizer: str | None = None) -> str:
    """A pod to hold a faked lock; bound to `node`, it stays Pending (its ConfigMap never comes)."""
    metadata = {"name": name, **({"finalizers": [finalizer]} if finalizer else {})}
    spec: dict[str, object] = {
        "containers": [{"name": "c", "image": "busybox"}],
        "volumes": [{"name": "cfg", "configMap": {"name": "never-created"}}],
    }
    if node:
        spec["nodeName"] = node
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})


def bind_failures(kube: Kube, namespace: str, pod: str) -> list[str]:
    return [
        e.get("message") or e.get("note") or ""
        for e in kube.pod_events(namespace, pod)
        if e.get("reason") == "BindingFailed"
    ]


def take_over_reasons(control_plane: ControlPlane, namespace: str, node: str) -> list[str]:
    """Why our binds in `namespace` took over `node`'s lock, from the `hami serve` log."""
    reasons = []
    for record in applog.about(
        control_plane.app_log.read_text(errors="replace"), namespace=namespace, node=node
    ):
        if record["msg"] == "node lock taken over":
            reasons.append(record["reason"])
    return reasons


def assert_binds_promptly(
    control_plane: ControlPlane, kube: Kube, namespace: str, node: str, reason: str
) -> None:
    start = time.monotonic()
    kube.apply(gpu_manifest("next", node=node), namespace)
    kube.wait_ready(namespace, ["next"], timeout=PROMPTLY)
    took = time.monotonic() - start
    assert kube.pod(namespace, "next")["spec"]["nodeName"] == node
    assert bind_failures(kube, namespace, "next") == [], f"took {took:.1f}s"
    # The device plugin (simulated) found "next" through the lock and released it.
    assert LOCK not in (kube.get("node", node)["metadata"].get("annotations") or {})
    assert wait_for(lambda: take_over_reasons(control_plane, namespace, node), timeout=5) == [
        reason
    ]


def test_lock_of_a_pod_that_runs_on_another_node_is_reclaimed_at_once(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    a, b = t4_node("reclaim-a"), t4_node("reclaim-b")
    nodesim(a, b)
    # What the killed bind leaves: the pod, placed again, runs on B; A's lock still names it.
    kube.apply(gpu_manifest("moved", node=b.name), namespace)
    kube.wait_ready(namespace, ["moved"])
    forge_hami_annotations(
        kube, "node", a.name, {LOCK: lock_value(namespace, "moved", timedelta(seconds=30))}
    )
    assert_binds_promptly(control_plane, kube, namespace, a.name, "holder-bound-elsewhere")


@pytest.mark.parametrize(
    ("holder", "annotations", "reason"),
    [
        pytest.param(None, {}, "holder-gone", id="gone"),
        pytest.param(
            "bound-here",
            {"hami.io/bind-phase": "success"},
            "holder-allocation-finished",
            id="bind-phase success",
        ),
        pytest.param(
            "bound-here",
            {"hami.io/bind-phase": "failed"},
            "holder-allocation-finished",
            id="bind-phase failed",
        ),
        pytest.param(
            "unbound",
            {
                "hami.io/vgpu-node": "reclaim-elsewhere",
                "hami.io/bind-phase": "allocating",
                "hami.io/bind-time": "{now}",
            },
            "holder-assigned-elsewhere",
            id="vgpu-node names another node",
        ),
        pytest.param("deleting", {}, "holder-deleted-unbound", id="unbound and being deleted"),
    ],
)
def test_lock_the_device_plugin_is_done_with_is_reclaimed_at_once(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    holder: str | None,
    annotations: dict[str, str],
    reason: str,
) -> None:
    node = t4_node("reclaim-one")
    nodesim(node)
    finalizer = "hami-py.test/keep" if holder == "deleting" else None
    if holder is not None:
        kube.apply(
            holder_pod("holder", node.name if holder == "bound-here" else None, finalizer),
            namespace,
        )
    try:
        if finalizer:
            kube("delete", "pod", "holder", "-n", namespace, "--wait=false")
        # Taken 30 s ago, so that what the holder's bind writes now comes after it.
        lock = lock_value(namespace, "holder", timedelta(seconds=30))
        forge_hami_annotations(kube, "node", node.name, {LOCK: lock})
        if annotations:
            now = str(int(time.time()))
            values = {k: v.format(now=now) for k, v in annotations.items()}
            forge_hami_annotations(kube, "pod", "holder", values, namespace)
        assert_binds_promptly(control_plane, kube, namespace, node.name, reason)
    finally:
        if finalizer:
            kube(
                "patch",
                "pod",
                "holder",
                "-n",
                namespace,
                "--type=json",
                "-p",
                '[{"op":"remove","path":"/metadata/finalizers"}]',
                check=False,
            )


def test_expired_lock_of_a_pod_awaiting_allocate_is_kept_until_the_plugin_is_done(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    node = t4_node("reclaim-kept")
    nodesim(node)
    # Bound here and not yet allocated: HAMi's plugin would give this pod the next pod's devices.
    kube.apply(holder_pod("holder", node.name), namespace)
    forge_hami_annotations(kube, "pod", "holder", {"hami.io/bind-phase": "allocating"}, namespace)
    lock = lock_value(namespace, "holder", timedelta(minutes=6))
    forge_hami_annotations(kube, "node", node.name, {LOCK: lock})

    kube.apply(gpu_manifest("next", node=node.name), namespace)
    messages = wait_for(
        lambda: bind_failures(kube, namespace, "next"), timeout=60, what="a BindingFailed event"
    )
    assert any(
        f"node {node.name} has been locked within 5m0s: node lock contention" in m
        and "past its 5m0s expiry too" in m
        for m in messages
    ), messages
    assert kube.get("node", node.name)["metadata"]["annotations"][LOCK] == lock

    # The plugin's verdict on the holder frees the lock for the next bind.
    forge_hami_annotations(kube, "pod", "holder", {"hami.io/bind-phase": "success"}, namespace)
    kube.wait_ready(namespace, ["next"], timeout=60)
    assert take_over_reasons(control_plane, namespace, node.name) == ["holder-allocation-finished"]
