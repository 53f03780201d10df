"""The node simulator behaves like kubelet and the device plugin where tests rely on it.

These pods are bound by setting spec.nodeName, so no scheduler decision is involved.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from .cluster import NodeSim
from .kube import Kube, wait_for
from .nodespec import t4_node

pytestmark = pytest.mark.e2e


def _pod(name: str, node: str, *, gpu: int = 0, env_from_configmap: str | None = None) -> str:
    limits = f"\n      limits: {{nvidia.com/gpu: {gpu}}}" if gpu else ""
    # Our webhook refuses GPU pods that arrive with a node; the opt-out label bypasses it.
    labels = "\n  labels: {hami.io/webhook: ignore}" if gpu else ""
    env_from = (
        f"\n    envFrom: [{{configMapRef: {{name: {env_from_configmap}}}}}]"
        if env_from_configmap
        else ""
    )
    return f"""\
apiVersion: v1
kind: Pod
metadata:
  name: {name}{labels}
spec:
  nodeName: {node}
  containers:
  - name: main
    image: busybox
    resources:{limits or " {}"}{env_from}
"""


@pytest.fixture
def node_a(nodesim: Callable[..., NodeSim]) -> str:
    nodesim(t4_node("node-a"))
    return "node-a"


def test_registers_node_like_the_device_plugin(kube: Kube, node_a: str) -> None:
    node = kube.get("node", node_a)

    assert node["metadata"]["labels"]["gpu"] == "on"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "40"
    assert node["metadata"]["annotations"]["hami.io/node-nvidia-register"].startswith(
        '[{"id":"GPU-node-a-0","count":10,"devmem":15360,"devcore":100,'
    )
    assert not node["spec"].get("taints"), "fake nodes must be schedulable"


def test_bound_pod_runs_and_graceful_delete_completes(
    kube: Kube, namespace: str, node_a: str
) -> None:
    kube.apply(_pod("plain", node_a), namespace)
    kube.wait_ready(namespace, ["plain"])

    kube("delete", "pod", "plain", "-n", namespace, "--wait=true", "--timeout=30s", timeout=45)
    assert kube("get", "pod", "plain", "-n", namespace, check=False).returncode != 0


def test_pod_waits_for_a_required_configmap(kube: Kube, namespace: str, node_a: str) -> None:
    kube.apply(_pod("needs-config", node_a, env_from_configmap="limits"), namespace)

    def waiting_reason() -> str | None:
        statuses = (
            kube.pod(namespace, "needs-config").get("status", {}).get("containerStatuses", [])
        )
        waiting = statuses[0]["state"].get("waiting", {}) if statuses else {}
        reason: str | None = waiting.get("reason")
        return reason

    assert wait_for(waiting_reason, 15, what="a waiting reason") == "CreateContainerConfigError"
    assert kube.pod(namespace, "needs-config")["status"]["phase"] == "Pending"

    kube("create", "configmap", "limits", "-n", namespace, "--from-literal=CUDA_MEM=1000")
    kube.wait_ready(namespace, ["needs-config"])


def test_gpu_pod_bound_without_hami_is_rejected_like_kubelet_does(
    kube: Kube, ignored: str, node_a: str
) -> None:
    # Our webhook refuses a GPU pod that names its node; an administrator's exempted
    # namespace is the way such a pod still comes about.
    kube.apply(_pod("unscheduled-gpu", node_a, gpu=1), ignored)

    def phase() -> str | None:
        value: str | None = kube.pod(ignored, "unscheduled-gpu").get("status", {}).get("phase")
        return value if value == "Failed" else None

    wait_for(phase, 15, what="the pod to fail admission")
    status = kube.pod(ignored, "unscheduled-gpu")["status"]
    assert status["reason"] == "UnexpectedAdmissionError"
    assert f"no binding pod found on node {node_a}" in status["message"]
