"""Binds on the real control plane: the GPU pods the bind tests place, the extender's endpoints
called as kube-scheduler calls them, a node lock held by another bind, what is bound."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime

from hami.engine.codec import decode_pod_devices
from hami.engine.names import ASSIGNED_NODE
from hami.engine.nvidianames import DEVICES_ALLOCATED
from tests.e2e.cluster import (
    AS_SCHEDULER,
    ControlPlane,
)
from tests.e2e.kube import Kube

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
  - name: cuda
    image: busybox
    resources: {{limits: {{nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}}}
"""


def post(control_plane: ControlPlane, verb: str, body: Mapping[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        f"{control_plane.extender_url}/{verb}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, object] = json.loads(response.read())
        return answer


def hold_lock(kube: Kube, namespace: str, node: str) -> str:
    """HAMi's node lock held by a pod bound to `node` that has not started yet (it waits for a
    ConfigMap nobody makes), so its Allocate may still come and the lock is kept; the lock."""
    holder = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: holder}\n"
        f"spec: {{nodeName: {node}, containers: [{{name: c, image: busybox}}], "
        "volumes: [{name: v, configMap: {name: never-created}}]}\n"
    )
    kube.apply(holder, namespace)
    lock = f"{datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')},{namespace},holder"
    kube("annotate", *AS_SCHEDULER, "node", node, f"hami.io/mutex.lock={lock}")
    return lock


def probe(control_plane: ControlPlane, path: str) -> tuple[int, str]:
    """Our process's answer to a probe (/readyz, /healthz, /healthz/pair)."""
    context = ssl.create_default_context(cafile=str(control_plane.app_tls.ca_file))
    try:
        with urllib.request.urlopen(
            f"{control_plane.app_url}{path}", context=context, timeout=10
        ) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def readyz(control_plane: ControlPlane) -> tuple[int, str]:
    return probe(control_plane, "/readyz")


def bound(kube: Kube, namespace: str) -> list[str]:
    pods = json.loads(kube("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    return sorted(p["metadata"]["name"] for p in pods if p["spec"].get("nodeName"))


# The pod the smoke and loopback tests place: one CUDA container on a share of one card.
SMOKE_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: smoke
spec:
  containers:
  - name: cuda
    image: nvidia/cuda:12.4.1-base-ubuntu22.04
    command: ["sleep", "infinity"]
    resources:
      limits:
        nvidia.com/gpu: 1
        nvidia.com/gpumem: 1000
"""


def allocation(kube: Kube, namespace: str, name: str) -> tuple[str, set[str]]:
    """(node, cards) of the allocation our bind wrote on the pod."""
    annotations = kube.pod(namespace, name)["metadata"].get("annotations") or {}
    devices = decode_pod_devices(annotations.get(DEVICES_ALLOCATED, ""))
    return annotations.get(ASSIGNED_NODE, ""), {d.uuid for c in devices for d in c}
