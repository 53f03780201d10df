"""A GPU pod's DRA claims on the real API server (issue 39): the webhook reads each claim and
template the pod names, through kube-apiserver, and refuses one whose DeviceClass hands out GPUs
(a template, or a pre-made claim several pods share), or one it cannot read; a claim of another
class passes. Creates are server-side dry runs: no DRA driver runs here, and none is needed to
store a claim or to ask for one.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from .kube import Kube

pytestmark = pytest.mark.e2e

DENIED = 'admission webhook "vgpu.hami.io" denied the request: GPU pod refused'
GPU = {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}}


def request(device_class: str) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": device_class}}]}}


def template(name: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": request(device_class)},
    }


def claim(name: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": request(device_class),
    }


def claiming(source: dict[str, str], gpu: bool = True) -> dict[str, Any]:
    """A pod whose GPU container (or, without `gpu`, whose only container) uses one claim."""
    resources: dict[str, Any] = {**(GPU if gpu else {}), "claims": [{"name": "c"}]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "cuda", "image": "busybox", "resources": resources}],
            "resourceClaims": [{"name": "c", **source}],
        },
    }


def dry_run(kube: Kube, pod: dict[str, Any], namespace: str) -> subprocess.CompletedProcess[str]:
    return kube(
        "create", "-n", namespace, "--dry-run=server", "-f", "-", stdin=json.dumps(pod), check=False
    )


def test_a_gpu_pods_claims_are_read_and_a_gpu_class_is_refused(kube: Kube, namespace: str) -> None:
    for obj in (
        template("one-mig", "mig.nvidia.com"),
        template("one-gpu", "gpu.nvidia.com"),
        template("rdma", "rdma.example.com"),
        claim("shared-mig", "mig.nvidia.com"),
        claim("shared-gpu", "hami-core-gpu.project-hami.io"),
    ):
        kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(obj))
    refused = {
        "one-mig": (
            {"resourceClaimTemplateName": "one-mig"},
            "spec.resourceClaims[0] (c) names ResourceClaimTemplate one-mig, which asks "
            "DeviceClass mig.nvidia.com for GPUs",
        ),
        "shared-mig": (
            {"resourceClaimName": "shared-mig"},
            "names ResourceClaim shared-mig, which asks DeviceClass mig.nvidia.com for GPUs",
        ),
        "missing": (
            {"resourceClaimTemplateName": "later"},
            "names ResourceClaimTemplate later, whose DeviceClass could not be read (there is "
            "none in the namespace yet)",
        ),
    }
    for case, (source, says) in refused.items():
        result = dry_run(kube, claiming(source), namespace)
        assert result.returncode != 0, f"{case} admitted"
        assert DENIED in result.stderr and says in result.stderr, result.stderr
    nic = dry_run(kube, claiming({"resourceClaimTemplateName": "rdma"}), namespace)
    assert nic.returncode == 0, nic.stderr
    # The classes the DRA bookkeeping counts (--dra-bookkeeping, on in the harness as in the
    # chart) hold cards the scheduler sees: a GPU pod may name them (test_dra_bookkeeping.py).
    for counted in ({"resourceClaimTemplateName": "one-gpu"}, {"resourceClaimName": "shared-gpu"}):
        admitted = dry_run(kube, claiming(counted), namespace)
        assert admitted.returncode == 0, admitted.stderr
    # A pod without GPU resources is the DRA driver's alone.
    dra_only = dry_run(
        kube, claiming({"resourceClaimTemplateName": "one-gpu"}, gpu=False), namespace
    )
    assert dra_only.returncode == 0, dra_only.stderr
