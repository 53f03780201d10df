"""The node tier's own plumbing: a pod runs on the real kubelet, its log and exec work, and a
Service's ClusterIP reaches it through kube-proxy, all inside the tier's network namespace."""

from __future__ import annotations

import json
import socket

import pytest

from .kube import wait_for
from .nodetier.cluster import NodeCluster
from .nodetier.plane import GATEWAY

pytestmark = [pytest.mark.node, pytest.mark.e2e]  # the built binaries, a real kubelet

WORKLOAD = "nvidia/cuda:12.4.1-base-ubuntu22.04"  # busybox, tagged as the lab's image


def test_a_pod_runs_and_serves_through_its_service(node_tier: NodeCluster) -> None:
    kube = node_tier.plane.kube
    kube.apply(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            "name": "echo",
                            "namespace": "default",
                            "labels": {"app": "echo"},
                        },
                        "spec": {
                            "containers": [
                                {
                                    "name": "echo",
                                    "image": WORKLOAD,
                                    "imagePullPolicy": "Never",
                                    # One answer per connection, for as long as it runs.
                                    "command": [
                                        "sh",
                                        "-c",
                                        "echo started; while true;"
                                        " do echo hello | nc -l -p 8080; done",
                                    ],
                                }
                            ]
                        },
                    },
                    {
                        "apiVersion": "v1",
                        "kind": "Service",
                        "metadata": {"name": "echo", "namespace": "default"},
                        "spec": {
                            "selector": {"app": "echo"},
                            "ports": [{"port": 80, "targetPort": 8080}],
                        },
                    },
                ],
            }
        )
    )
    kube("wait", "--for=condition=Ready", "pod/echo", "--timeout=120s", timeout=130)
    pod_ip = kube("get", "pod", "echo", "-o", "jsonpath={.status.podIP}").stdout
    assert pod_ip.startswith("10.88.") and pod_ip != GATEWAY
    assert "started" in kube("logs", "echo").stdout
    assert kube("exec", "echo", "--", "cat", "/proc/1/cmdline").stdout.startswith("sh")
    cluster_ip = kube("get", "service", "echo", "-o", "jsonpath={.spec.clusterIP}").stdout

    def answers() -> bool:
        try:
            with socket.create_connection((cluster_ip, 80), timeout=2) as conn:
                return conn.recv(64).strip() == b"hello"
        except OSError:
            return False

    wait_for(answers, timeout=60, what=f"the Service at {cluster_ip}:80 to answer")
