"""No GPU pod escapes its slice or the scheduler's count at creation, on the real API server.

Every case is a GPU pod the attack suite got created (201) before these checks: a preset
spec.nodeName next to the `hami.io/webhook: ignore` label or another scheduler's name, a
privileged container under another scheduler, a capability or host path that reaches the
driver, a sidecar or init container that asks the NVIDIA runtime for every card, and an
ephemeral container added with `kubectl debug`. Each is now refused by our webhook, through
kube-apiserver, with the field and the fix in kubectl's error; with the chart's admission
policy and without it (it guards scheduling state, not these fields). An administrator's
namespace exemption still lets such a pod in.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.builders import container, submitted_pod

from .kube import Kube

pytestmark = pytest.mark.e2e

DENIED = 'admission webhook "vgpu.hami.io" denied the request: GPU pod refused'
WHOLE_CARD = {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}


def gpu_pod(name: str, scheduler: str = "", labels: dict[str, str] | None = None) -> dict[str, Any]:
    pod = submitted_pod(container(WHOLE_CARD, "cuda"), name=name)
    pod["metadata"]["labels"] = labels or {}
    if scheduler:
        pod["spec"]["schedulerName"] = scheduler
    return pod


def changed(pod: dict[str, Any], **spec: Any) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    out["spec"].update(spec)
    return out


def gpu_container(pod: dict[str, Any], **fields: Any) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    out["spec"]["containers"][0].update(fields)
    return out


def sidecar(pod: dict[str, Any], **fields: Any) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    out["spec"]["containers"].append({"name": "sidecar", "image": "busybox", **fields})
    return out


def host_path(pod: dict[str, Any], path: str) -> dict[str, Any]:
    out = changed(pod, volumes=[{"name": "host", "hostPath": {"path": path}}])
    out["spec"]["containers"][0]["volumeMounts"] = [{"name": "host", "mountPath": "/host"}]
    return out


IGNORE = {"hami.io/webhook": "ignore"}
CASES = {
    # (the pod, what kubectl's error must name)
    "node-named-with-the-ignore-label": (
        changed(gpu_pod("p", labels=IGNORE), nodeName="gpu-07"),
        "spec.nodeName is set (gpu-07)",
    ),
    "node-named-under-another-scheduler": (
        changed(gpu_pod("p", "other"), nodeName="gpu-07"),
        "remove spec.nodeName",
    ),
    "privileged-under-another-scheduler": (
        gpu_container(gpu_pod("p", "other"), securityContext={"privileged": True}),
        "container cuda is privileged (spec.containers[0].securityContext.privileged)",
    ),
    "privileged-with-the-ignore-label": (
        gpu_container(gpu_pod("p", labels=IGNORE), securityContext={"privileged": True}),
        "remove privileged: true",
    ),
    "cap-sys-admin": (
        gpu_container(gpu_pod("p"), securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}),
        "adds SYS_ADMIN (spec.containers[0].securityContext.capabilities.add)",
    ),
    "host-dev": (
        host_path(gpu_pod("p"), "/dev"),
        "(spec.containers[0].volumeMounts[0]), hostPath /dev, writable: the device nodes",
    ),
    "host-dev-nvidia0": (
        host_path(gpu_pod("p", "other"), "/dev/nvidia0"),
        "hostPath /dev/nvidia0, writable: the device nodes of every card on the node",
    ),
    "sidecar-visible-devices-all": (
        sidecar(gpu_pod("p"), env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
        "container sidecar sets NVIDIA_VISIBLE_DEVICES=all (spec.containers[1].env[0])",
    ),
    "driver-capabilities-all": (
        gpu_container(gpu_pod("p"), env=[{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "all"}]),
        "list compute, utility and compat32 only",
    ),
    "init-container-visible-devices": (
        changed(
            gpu_pod("p"),
            initContainers=[
                {
                    "name": "setup",
                    "image": "busybox",
                    "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0,1,2,3"}],
                }
            ],
        ),
        "container setup sets NVIDIA_VISIBLE_DEVICES=0,1,2,3 (spec.initContainers[0].env[0])",
    ),
    # In a sidecar the webhook's NVIDIA_VISIBLE_DEVICES=none pin makes it harmless; the GPU
    # container's cards come from the device plugin's value, which it cannot pin.
    "env-from-without-a-prefix": (
        gpu_container(gpu_pod("p"), envFrom=[{"configMapRef": {"name": "settings"}}]),
        "list the variables the application needs under env instead, each with "
        "valueFrom.configMapKeyRef or secretKeyRef",
    ),
    "device-list-mount": (
        sidecar(
            changed(gpu_pod("p"), volumes=[{"name": "e", "emptyDir": {}}]),
            volumeMounts=[{"name": "e", "mountPath": "/var/run/nvidia-container-devices/all"}],
        ),
        "where the NVIDIA runtime reads which cards to expose",
    ),
}


def refused(kube: Kube, pod: dict[str, Any], namespace: str) -> str:
    result = kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(pod), check=False)
    assert result.returncode != 0, f"{pod['metadata']['name']} was created"
    return result.stderr


@pytest.mark.parametrize("case", CASES)
def test_a_gpu_pod_that_would_escape_is_refused_naming_the_field_and_the_fix(
    kube: Kube, namespace: str, admission_policy: bool, case: str
) -> None:
    pod, says = CASES[case]
    message = refused(kube, pod, namespace)
    assert DENIED in message and says in message, message


def test_an_administrators_namespace_exemption_still_admits_them(
    kube: Kube, ignored: str, admission_policy: bool
) -> None:
    pod, _ = CASES["node-named-under-another-scheduler"]
    kube("create", "-n", ignored, "--dry-run=server", "-f", "-", stdin=json.dumps(pod))


def test_ephemeral_containers_added_to_a_gpu_pod_are_checked(
    kube: Kube, namespace: str, admission_policy: bool, tmp_path: Path
) -> None:
    """kubectl debug adds them through pods/ephemeralcontainers, an UPDATE the webhook sees."""
    # Nobody schedules it: an ephemeral container needs only the pod object.
    kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_pod("target", "nobody")))
    debug = ("debug", "-n", namespace, "pod/target", "--image=busybox")
    result = kube(*debug, "-c", "root", "--profile=sysadmin", check=False)
    assert result.returncode != 0, "a privileged debug container was added"
    assert DENIED in result.stderr and "container root is privileged" in result.stderr
    assert "spec.ephemeralContainers[0].securityContext.privileged" in result.stderr
    custom = tmp_path / "env.json"
    custom.write_text(json.dumps({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}))
    result = kube(*debug, "-c", "peek", f"--custom={custom}", check=False)
    assert result.returncode != 0 and "NVIDIA_VISIBLE_DEVICES=all" in result.stderr, result
    kube(*debug, "-c", "plain", "--profile=general")
    added = kube.pod(namespace, "target")["spec"]["ephemeralContainers"]
    assert [c["name"] for c in added] == ["plain"]
