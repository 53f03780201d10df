"""Lab 12 (standalone injection without HAMi's device plugin): its example pods, card and the
flags of its standalone mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.e2e.kube import Kube

LAB12 = Path(__file__).resolve().parents[2] / "examples" / "lab12" / "04-shared-pods.yaml"

LAB12_SOURCE = LAB12.parent / "memory-limit.cu"

LAB12_UUID = "GPU-9acc8878-3967-5fb4-c534-43d6fd820fa6"

GKE = ("--driver-profile", "gke")

STANDALONE = (
    *GKE,
    "--node-integration",
    "standalone",
    "--hook-path",
    "/home/kubernetes/bin/nvidia/vgpu",
)


def apply_lab12(kube: Kube, namespace: str) -> None:
    """Lab 12, Step 6: the proof's source as a ConfigMap (the pods mount it), then the pods."""
    kube(
        *("create", "configmap", "kai-hami-lab12-source", "-n", namespace),
        f"--from-file=memory-limit.cu={LAB12_SOURCE}",
    )
    kube("apply", "-n", namespace, "-f", str(LAB12))


def without_driver_plumbing(path: Path) -> str:
    """The lab's manifest minus the lib64 volume, mount and LD_LIBRARY_PATH written by hand."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for pod in docs:
        pod["spec"].pop("volumes", None)
        for c in pod["spec"]["containers"]:
            c.pop("volumeMounts", None)
            c.pop("env", None)
    return yaml.safe_dump_all(docs)


def resolved_env(kube: Kube, ns: str, container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as kubelet would resolve it from the pod and its ConfigMaps."""
    out: dict[str, str] = {}
    for e in container.get("env", []):
        if "value" in e:
            out[e["name"]] = e["value"]
            continue
        ref = (e.get("valueFrom") or {}).get("configMapKeyRef")
        if ref:
            data = kube.get("configmap", ref["name"], ns).get("data") or {}
            out[e["name"]] = data[ref["key"]]
    return out
