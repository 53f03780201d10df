"""No GPU pod gets out of its slice after creation, on the real API server.

A Pending GPU pod (held by a scheduling gate) was stored as admitted; then a PATCH adding a
device annotation (CDI's, the GPU Operator's, GKE's NRI injector's) used to be stored and the
gate lifted with the annotation kept. Each is now refused by our webhook through the pod and
through its status, with the chart's admission policy and without its binding, and with the
chart's matchConditions and without any; an update that adds no way out, and any update of a
pod without GPU resources, still passes.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.builders import container, submitted_pod

from .cluster import ControlPlane
from .kube import Kube

pytestmark = pytest.mark.e2e

DENIED = 'admission webhook "vgpu.hami.io" denied the request: GPU pod refused'
GATE = {"name": "example.com/hold"}
ANNOTATIONS = {
    "cdi.k8s.io/gpu": "nvidia.com/gpu=all",
    "nvidia.cdi.k8s.io/container.cuda": "management.nvidia.com/gpu=all",
    "devices.gke.io/container.cuda": "- path: /dev/nvidia0\n- path: /dev/nvidiactl\n",
}


@pytest.fixture(scope="module", params=["without-matchConditions", "with-chart-matchConditions"])
def match_conditions(request: pytest.FixtureRequest, control_plane: ControlPlane) -> Iterator[bool]:
    """Without any matchConditions every pod update reaches the webhook, which decides alone;
    with the chart's, only a GPU pod's updates that add or change an annotation do."""
    if request.param == "without-matchConditions":
        control_plane.set_match_conditions([])
    else:
        rendered = yaml.safe_load(control_plane.render_chart("templates/webhook.yaml"))
        control_plane.set_match_conditions(rendered["webhooks"][0]["matchConditions"])
    try:
        yield request.param != "without-matchConditions"
    finally:
        control_plane.set_match_conditions(control_plane.harness_match_conditions())


def pending_pod(name: str, gpu: bool = True) -> dict[str, Any]:
    """submitted_pod held by GATE, its container asking for a share of one card unless not `gpu`."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"} if gpu else None
    return submitted_pod(container(limits, "cuda"), name=name, schedulingGates=[GATE])


def patch(
    kube: Kube, namespace: str, name: str, body: dict[str, Any], status: bool = False
) -> subprocess.CompletedProcess[str]:
    return kube(
        "patch",
        "pod",
        name,
        "-n",
        namespace,
        "--type=merge",
        *(["--subresource=status"] if status else []),
        "-p",
        json.dumps(body),
        check=False,
    )


def stored_annotations(kube: Kube, namespace: str, name: str) -> dict[str, str]:
    found: dict[str, str] = kube.pod(namespace, name)["metadata"].get("annotations") or {}
    return found


def test_an_update_adding_a_device_annotation_to_a_pending_gpu_pod_is_refused(
    kube: Kube, namespace: str, admission_policy: bool, match_conditions: bool
) -> None:
    kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(pending_pod("gpu")))
    for status in (False, True):
        for key, value in ANNOTATIONS.items():
            result = patch(
                kube, namespace, "gpu", {"metadata": {"annotations": {key: value}}}, status
            )
            assert result.returncode != 0, f"{key} stored (status: {status})"
            assert DENIED in result.stderr, result.stderr
            assert f"annotation {key} asks" in result.stderr, result.stderr
    assert not set(ANNOTATIONS) & set(stored_annotations(kube, namespace, "gpu"))
    # What adds no way out is stored: another annotation, and lifting the gate.
    note = {"metadata": {"annotations": {"example.com/owner": "team-a"}}}
    assert patch(kube, namespace, "gpu", note).returncode == 0
    assert patch(kube, namespace, "gpu", {"spec": {"schedulingGates": None}}).returncode == 0
    assert "schedulingGates" not in kube.pod(namespace, "gpu")["spec"]
    # A pod without GPU resources is not ours after creation either.
    kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(pending_pod("cpu", gpu=False)))
    nic = {"metadata": {"annotations": {"cdi.k8s.io/nic": "example.com/nic=0"}}}
    result = patch(kube, namespace, "cpu", nic)
    assert result.returncode == 0, result.stderr
    assert stored_annotations(kube, namespace, "cpu")["cdi.k8s.io/nic"] == "example.com/nic=0"
