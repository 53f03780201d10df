"""Bind on the real control plane: retries are idempotent, failures roll back."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e.binds import POD, hold_lock, post

from .cluster import AS_SCHEDULER, ControlPlane, NodeSim
from .kube import Kube, wait_for
from .nodespec import NodeSpec, t4_node

pytestmark = pytest.mark.e2e


def test_bind_retry_of_a_bound_pod_succeeds_without_a_second_allocation(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    node = t4_node("bind-retry")
    nodesim(node)
    kube.apply(POD.format(name="once"), namespace)
    kube.wait_ready(namespace, ["once"])
    before = kube.pod(namespace, "once")

    args = {
        "PodName": "once",
        "PodNamespace": namespace,
        "PodUID": before["metadata"]["uid"],
        "Node": node.name,
    }
    assert post(control_plane, "bind", args) == {"Error": ""}

    after = kube.pod(namespace, "once")
    assert after["metadata"]["annotations"] == before["metadata"]["annotations"]
    assert "hami.io/mutex.lock" not in (
        kube.get("node", node.name)["metadata"].get("annotations") or {}
    )


def test_bind_failure_rolls_back_and_the_pod_lands_once_the_lock_is_free(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    node = t4_node("bind-locked")
    nodesim(node)
    # Another pod holds HAMi's node lock, bound to the node and not started yet: its Allocate
    # may still come, so the lock is kept, past the 15 s after which the lock of an unbound
    # holder nobody binds is taken over.
    lock = hold_lock(kube, namespace, node.name)

    kube.apply(POD.format(name="waits"), namespace)

    def bind_failed() -> list[str]:
        return [
            e.get("message") or e.get("note") or ""
            for e in kube.pod_events(namespace, "waits")
            if e.get("reason") == "BindingFailed"
        ]

    messages = wait_for(bind_failed, timeout=60, what="a BindingFailed event")
    assert any(
        f"node {node.name} has been locked within 5m0s: node lock contention" in m for m in messages
    ), messages
    pod = kube.pod(namespace, "waits")
    assert not pod["spec"].get("nodeName")
    # Nothing of the failed bind is left on the pod, and the holder keeps its lock.
    assert not any(k.startswith("hami.io/vgpu-") for k in pod["metadata"].get("annotations") or {})
    assert kube.get("node", node.name)["metadata"]["annotations"]["hami.io/mutex.lock"] == lock

    kube("annotate", *AS_SCHEDULER, "node", node.name, "hami.io/mutex.lock-")
    kube.wait_ready(namespace, ["waits"], timeout=120)
    allocated = kube.pod(namespace, "waits")["metadata"]["annotations"][
        "hami.io/vgpu-devices-allocated"
    ]
    assert allocated.startswith("GPU-bind-locked-")


def test_pod_with_zero_gpus_and_a_gpumem_is_bound_like_hami_binds_it(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    # Templated charts write `nvidia.com/gpu: 0` beside a gpumem. The webhook claims the pod
    # (the count is there), filter passes every node (no card is asked for), and HAMi's bind
    # binds it with no lock and no allocation; ours used to refuse it at bind forever.
    node = t4_node("bind-zero")
    nodesim(node)
    manifest = POD.format(name="zero").replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 0")
    kube.apply(manifest, namespace)
    wait_for(
        lambda: kube.pod(namespace, "zero")["spec"].get("nodeName"), timeout=60, what="a Binding"
    )
    pod = kube.pod(namespace, "zero")
    assert pod["spec"]["nodeName"] == node.name
    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    assert not any(k.startswith("hami.io/") for k in pod["metadata"].get("annotations") or {})
    assert "hami.io/mutex.lock" not in (
        kube.get("node", node.name)["metadata"].get("annotations") or {}
    )
    kube.wait_ready(namespace, ["zero"])


def test_gpu_less_container_keeps_its_empty_entry_and_the_pod_starts(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    # HAMi's device plugin names the container of the n-th allocation entry by position, so a
    # GPU-less container before the GPU one keeps an empty entry; the simulated plugin, like
    # the real one, hands the first entry with cards to the first Allocate.
    node = t4_node("bind-sidecar")
    nodesim(node)
    manifest = POD.format(name="sidecar").replace(
        "  containers:\n", "  containers:\n  - name: log\n    image: busybox\n"
    )
    kube.apply(manifest, namespace)
    kube.wait_ready(namespace, ["sidecar"])
    annotations = kube.pod(namespace, "sidecar")["metadata"]["annotations"]
    allocated = annotations["hami.io/vgpu-devices-allocated"]
    assert allocated.startswith(";GPU-bind-sidecar-") and allocated.endswith(",NVIDIA,1000,0:;")
    assert annotations["hami.io/bind-phase"] == "success"


INIT_ONLY = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  initContainers:
  - name: prepare
    image: busybox
    resources: {{limits: {{nvidia.com/gpu: 1, nvidia.com/gpumem: 3000}}}}
  containers:
  - name: main
    image: busybox
"""


def test_a_pod_whose_only_gpu_is_an_init_container_s_is_bound_under_the_node_lock(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    # From the stand-in for HAMi's device plugin (tests/e2e/nodesim.py): its Allocate takes 6 s,
    # long enough for a second pod to be bound to the node before the first one's Allocate; it
    # finds the pod to allocate as HAMi's does (the pod the node lock names, else a pod in
    # bind-phase allocating) and logs which one it found. Bound without the lock (HAMi's
    # rule: app containers only), the first pod's Allocate found the second through its lock.
    t4 = t4_node("bind-init-lock")
    sim = nodesim(NodeSpec(t4.name, t4.cards, t4.split, allocate_delay=6.0))
    kube.apply(INIT_ONLY.format(name="first"), namespace)
    wait_for(
        lambda: kube.pod(namespace, "first")["spec"].get("nodeName"), timeout=60, what="a Binding"
    )
    kube.apply(POD.format(name="second").replace("gpumem: 1000", "gpumem: 5000"), namespace)

    pair = ("first", "second")

    def settled() -> list[str] | None:
        phases = [kube.pod(namespace, n).get("status", {}).get("phase") for n in pair]
        return phases if all(p in ("Running", "Failed") for p in phases) else None

    assert wait_for(settled, timeout=180, what="both pods started or failed") == ["Running"] * 2
    log = sim.process.log.read_text(errors="replace")
    for name in pair:
        assert f"{namespace}/{name}: Allocate finds {namespace}/{name} pending" in log, log
        assert f"the node lock names {namespace}/{name}" in log, log
    # What our scheduler wrote: each pod its own card share, the allocation completed.
    first = kube.pod(namespace, "first")["metadata"]["annotations"]
    second = kube.pod(namespace, "second")["metadata"]["annotations"]
    assert first["hami.io/vgpu-devices-allocated"].endswith(",NVIDIA,3000,0:;;")
    assert second["hami.io/vgpu-devices-allocated"].endswith(",NVIDIA,5000,0:;")
    assert first["hami.io/bind-phase"] == second["hami.io/bind-phase"] == "success"
    assert "hami.io/mutex.lock" not in (
        kube.get("node", t4.name)["metadata"].get("annotations") or {}
    )
