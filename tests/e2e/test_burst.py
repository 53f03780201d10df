"""Forty GPU pods created at once, all fitting on one node (HAMi issue #1367).

Binds to one node are serialised by HAMi's node lock until the device plugin
has allocated each pod; every pod must still land, on distinct slots, with no
card over-committed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from .cluster import NodeSim
from .kube import Kube
from .nodespec import t4_node

pytestmark = pytest.mark.e2e

PODS = 40


def test_burst_of_pods_onto_one_node(
    kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    node = t4_node("burst")
    nodesim(node)
    manifest = "\n---\n".join(
        f"""apiVersion: v1
kind: Pod
metadata: {{name: burst-{i:02d}, labels: {{app: burst}}}}
spec:
  containers:
  - name: c
    image: busybox
    resources: {{limits: {{nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}}}"""
        for i in range(PODS)
    )
    started = time.monotonic()
    kube.apply(manifest, namespace)
    kube.wait_ready(namespace, [f"burst-{i:02d}" for i in range(PODS)], timeout=240)
    elapsed = time.monotonic() - started
    print(f"[burst] {PODS} pods bound and Ready on one node in {elapsed:.1f}s")

    per_card: dict[str, int] = {}
    for i in range(PODS):
        allocated = kube.pod_annotation(
            namespace, f"burst-{i:02d}", "hami.io/vgpu-devices-allocated"
        )
        assert allocated is not None
        uuid = allocated.split(",")[0]
        per_card[uuid] = per_card.get(uuid, 0) + 1
    # 4 cards x split 10, 1000 MiB each: exactly full, never beyond.
    assert sorted(per_card.values()) == [10, 10, 10, 10], per_card
