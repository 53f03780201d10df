"""The loopback guard itself: what it flags and what it lets pass; and kube-apiserver calling a
simulated node's kubelet on loopback."""

from collections.abc import Callable

import pytest

from tests.e2e.binds import SMOKE_POD

from .cluster import NodeSim
from .kube import Kube
from .loopback import off_loopback
from .nodespec import t4_node


@pytest.mark.parametrize(
    "line",
    [
        'failed calling webhook "vgpu.hami.io": Post "https://hami-scheduler.ns.svc:443/webhook"',
        "dial tcp 10.0.0.7:443: connect: connection refused",
        "dial tcp [fd00::1]:443: i/o timeout",
        "Post https://192.168.1.4:9443/webhook",
        "scrape http://10.0.0.9:9395/metrics",
        # DNS: the name went to the machine's resolver, wherever that forwards it.
        'Get "https://node-a:10250/containerLogs/ns/p/c": dial tcp: lookup node-a on '
        "127.0.0.53:53: server misbehaving",
        "dial tcp: lookup gke-node: no such host",
    ],
)
def test_off_loopback_targets_are_flagged(line: str) -> None:
    assert off_loopback([line]) == [line]


@pytest.mark.parametrize(
    "line",
    [
        "dial tcp 127.0.0.1:6443: connect: connection refused",
        'Post "https://127.0.0.1:40123/webhook?timeout=10s"',
        "dial tcp [::1]:443",
        "http://localhost:9090/api/v1/query",
        "see https://kubernetes.io/docs/reference for the flags",
        "--service-cluster-ip-range=10.0.0.0/24",
        "dial tcp: lookup localhost on 127.0.0.53:53: no such host",
    ],
)
def test_loopback_and_documentation_pass(line: str) -> None:
    assert off_loopback([line]) == []


@pytest.mark.e2e
def test_kube_apiserver_reaches_a_simulated_kubelet_at_127_0_0_1_without_a_lookup(
    kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    """`kubectl logs` makes kube-apiserver call the pod's kubelet: at the node's InternalIP,
    never by resolving its name (no kubelet listens there, so the call is refused)."""
    nodesim(t4_node("loopback-node"))
    kube.apply(SMOKE_POD, namespace)
    kube.wait_ready(namespace, ["smoke"])
    result = kube("logs", "-n", namespace, "smoke", check=False)
    assert result.returncode != 0
    assert "127.0.0.1:" in result.stderr and "lookup" not in result.stderr, result.stderr
