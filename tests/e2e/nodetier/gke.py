"""GKE's own NVIDIA device plugin on the node tier, as GKE runs it: a DaemonSet in kube-system on
nodes with the accelerator label, unless they carry gke-no-default-nvidia-gpu-device-plugin=true
(Lab 14, Step 2). The plugin in it is the stand-in (tests/e2e/fake_device_plugin.py, GKE mode)."""

from __future__ import annotations

import json

from tests.e2e.kube import Kube, wait_for
from tests.e2e.nodespec import GPU_RESOURCE

NAME = "nvidia-gpu-device-plugin-small-cos"
NAMESPACE = "kube-system"
IMAGE = "docker.io/projecthami/hami:v2.10.0"  # the stand-in image holds both plugins


def manifest(shared_clients: int) -> str:
    """``shared_clients``: GKE's GPU time-sharing, the clients per card (1: off)."""
    volumes = {
        "device-plugin": "/var/lib/kubelet/device-plugins",
        "driver": "/home/kubernetes/bin/nvidia",
    }
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": {"k8s-app": NAME}},
        "spec": {
            "selector": {"matchLabels": {"k8s-app": NAME}},
            "template": {
                "metadata": {"labels": {"k8s-app": NAME}},
                "spec": {
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": "cloud.google.com/gke-accelerator",
                                                "operator": "Exists",
                                            },
                                            {
                                                "key": "gke-no-default-nvidia-gpu-device-plugin",
                                                "operator": "NotIn",
                                                "values": ["true"],
                                            },
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "tolerations": [{"operator": "Exists"}],
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "nvidia-gpu-device-plugin",
                            "image": IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["gke-nvidia-device-plugin"],
                            "env": [
                                {
                                    "name": "NODE_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                                },
                                {"name": "SHARED_CLIENTS", "value": str(shared_clients)},
                            ],
                            "securityContext": {"privileged": True},
                            "volumeMounts": [
                                {"name": "device-plugin", "mountPath": volumes["device-plugin"]},
                                {"name": "driver", "mountPath": "/driver-root", "readOnly": True},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": name, "hostPath": {"path": path}} for name, path in volumes.items()
                    ],
                },
            },
        },
    }
    return json.dumps(daemonset)


def run(kube: Kube, node: str, shared_clients: int, cards: int) -> None:
    """(Re)start GKE's plugin and wait until the kubelet advertises what it lists."""
    # Foreground: the old pod is gone (and off the kubelet) before the new one registers.
    kube(
        *("delete", "daemonset", NAME, "-n", NAMESPACE, "--ignore-not-found"),
        *("--cascade=foreground", "--wait=true"),
        timeout=90,
    )
    kube("apply", "-f", "-", stdin=manifest(shared_clients))
    wait_advertised(kube, node, cards * shared_clients)


def wait_advertised(kube: Kube, node: str, count: int) -> None:
    jsonpath = "jsonpath={.status.allocatable.nvidia\\.com/gpu}"
    wait_for(
        lambda: kube("get", "node", node, "-o", jsonpath).stdout == str(count),
        timeout=120,
        what=f"the kubelet to advertise {count} {GPU_RESOURCE}",
    )
