"""Two tenants under the default node policy (binpack): a flood from one does not hold up the
other, and the flood's binds do not queue on one node's lock (issue 33).

Binpack sends every pod to the fullest node that fits; with HAMi's node lock taken for each
bind until the device plugin has allocated, a burst's binds would wait on one node in turn.
The scheduler sends a pod to the best node no bind waits on instead.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable

import pytest

from .cluster import ControlPlane, NodeSim
from .kube import Kube
from .nodespec import t4_node

pytestmark = pytest.mark.e2e

FLOOD = 60  # 1000 MiB shares: a node of 4 T4s split 10 takes 40
SMALL = 4


def pods(prefix: str, count: int) -> str:
    return "\n---\n".join(
        f"""apiVersion: v1
kind: Pod
metadata:
  name: {prefix}-{i:02d}
  annotations: {{hami.io/node-scheduler-policy: binpack}}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: busybox
    resources: {{limits: {{nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}}}"""
        for i in range(count)
    )


def bind_failures(plane: ControlPlane) -> float:
    with urllib.request.urlopen(plane.metrics_url, timeout=10) as r:
        text = r.read().decode()
    prefix = "hami_bind_failures_total{"
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)
    )


def test_a_binpack_flood_spreads_its_binds_and_a_small_tenant_is_not_held_up(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    nodesim(*(t4_node(f"tenants-{n}") for n in range(4)))
    small = f"{namespace}-b"
    kube("create", "namespace", small)
    try:
        failed_before = bind_failures(control_plane)
        kube.apply(pods("flood", FLOOD), namespace)
        kube.apply(pods("small", SMALL), small)
        kube.wait_ready(small, [f"small-{i:02d}" for i in range(SMALL)], timeout=240)
        kube.wait_ready(namespace, [f"flood-{i:02d}" for i in range(FLOOD)], timeout=300)
        nodes = {kube.pod(namespace, f"flood-{i:02d}")["spec"]["nodeName"] for i in range(FLOOD)}
        # HAMi's binpack: 40 on one node, 20 on the next, each bind waiting for the one before.
        assert len(nodes) > 2, nodes
        failed = bind_failures(control_plane) - failed_before
        assert failed <= 0.1 * (FLOOD + SMALL), failed
    finally:
        # As the namespace fixture does: gone before the simulated nodes are, or they would be
        # left bound to nodes that no longer exist for the tests after this one.
        kube(
            "delete", "pods", "--all", "-n", small, "--force", "--grace-period=0",
            "--wait=true", "--timeout=60s", timeout=90,
        )  # fmt: skip
