"""`hami explain` against the real API server, for a pod kube-scheduler could not place."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest

from .cluster import ControlPlane, NodeSim
from .kube import Kube, wait_for
from .nodespec import t4_node

pytestmark = pytest.mark.e2e

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  annotations: {{hami.io/gpu-scheduler-policy: mutex}}
spec:
  containers:
  - name: c
    image: busybox
    resources: {{limits: {{nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}}}
"""


def test_explain_a_pending_mutex_pod(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    node = t4_node("explain-node", ["GPU-explain-0"])
    nodesim(node)
    kube.apply(POD.format(name="first"), namespace)
    kube.wait_ready(namespace, ["first"])
    kube.apply(POD.format(name="second"), namespace)
    wait_for(
        lambda: kube.pod_scheduled_message(namespace, "second"),
        timeout=60,
        what="second to be unschedulable",
    )

    def explain(pod: str) -> str:
        argv = [
            sys.executable,
            "-m",
            "hami",
            "explain",
            f"{namespace}/{pod}",
            "--kubeconfig",
            str(control_plane.kubeconfig),
        ]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout

    out = explain("second")
    assert f"{namespace}/second is pending (GPU policy 'mutex', node policy 'binpack')" in out
    assert f"  {node.name}: 1/1 ExclusiveDeviceAllocateConflict" in out

    bound = explain("first")
    assert bound.startswith(f"{namespace}/first is bound to {node.name}")
    assert "cards: GPU-explain-0,NVIDIA,1000,0:;" in bound


def test_explain_agrees_with_kube_scheduler_on_a_node_the_selector_excludes(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    # The card is free, but the pod's nodeSelector rules the node out: kube-scheduler never asks
    # the extender about it, and explain must not say the pod "fits now" there.
    node = t4_node("explain-selector", ["GPU-selector-0"])
    nodesim(node)
    manifest = POD.format(name="elsewhere").replace(
        "spec:\n", "spec:\n  nodeSelector: {pool: somewhere-else}\n"
    )
    kube.apply(manifest, namespace)
    message = wait_for(
        lambda: kube.pod_scheduled_message(namespace, "elsewhere"),
        timeout=60,
        what="the pod to be unschedulable",
    )
    argv = [sys.executable, "-m", "hami", "explain", f"{namespace}/elsewhere"]
    argv += ["--kubeconfig", str(control_plane.kubeconfig)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    assert "fits now" not in out, out
    sentence = out.splitlines()[1].strip()
    assert (
        sentence == "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
    )
    assert message is not None and message.startswith(sentence), (message, out)


def test_node_without_the_device_plugin_reads_as_under_hami(
    control_plane: ControlPlane, kube: Kube, namespace: str
) -> None:
    # kube-scheduler copies the extender's reason into FailedScheduling: it must read exactly
    # as under HAMi. Why the node is unregistered goes into an Event and into explain.
    kube.apply("apiVersion: v1\nkind: Node\nmetadata: {name: no-plugin}\n")
    room = '{"pods": "110", "cpu": "8", "memory": "32Gi"}'
    status = f'{{"status": {{"capacity": {room}, "allocatable": {room}}}}}'
    try:
        kube("patch", "node", "no-plugin", "--subresource=status", "--type=merge", "-p", status)
        kube.apply(POD.format(name="nowhere"), namespace)
        message = wait_for(
            lambda: kube.pod_scheduled_message(namespace, "nowhere"),
            timeout=60,
            what="the pod to be unschedulable",
        )
        assert message is not None
        assert message.startswith("0/1 nodes are available: 1 node unregistered."), message

        def cause() -> list[str]:
            return [
                e.get("message") or e.get("note") or ""
                for e in kube.pod_events(namespace, "nowhere")
                if "nodes unregistered, no hami.io/node-nvidia-register" in (e.get("message") or "")
            ]

        wait_for(cause, timeout=30, what="a FilteringFailed event with the cause")
        argv = [sys.executable, "-m", "hami", "explain", f"{namespace}/nowhere"]
        argv += ["--kubeconfig", str(control_plane.kubeconfig)]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
        assert "  no-plugin: node unregistered (no hami.io/node-nvidia-register annotation" in out
    finally:
        kube("delete", "node", "no-plugin", "--ignore-not-found")
