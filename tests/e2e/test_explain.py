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
