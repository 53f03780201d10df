"""Pods of the other device families on the real control plane, and the shares they are
counted for until released."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from hami.engine.families.base import Family
from hami.engine.families.registry import Families
from hami.engine.inventory import pod_allocation
from tests.builders import FAMILIES, family_limits
from tests.e2e.cluster import ControlPlane
from tests.e2e.kube import Kube, wait_for

# Memory asked beside the count, by family type, where the value means the same to the
# family's sample card (a stand-in; units differ between families).
MEMORY = {"DCU": 1000}


def manifest(name: str, family: Family) -> str:
    limits = family_limits(family, 1, MEMORY.get(family.wire.type))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}]
        },
    }
    return json.dumps(pod)


def shared(control_plane: ControlPlane, uuid: str) -> float | None:
    """Tasks our metrics count on the card (hami_gpu_shared_count), None while not listed."""
    with urllib.request.urlopen(control_plane.metrics_url, timeout=30) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith("hami_gpu_shared_count{") and f'device_uuid="{uuid}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def counted_then_released(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    pod: dict[str, Any],
    families: Families = FAMILIES,
) -> None:
    """The bound pod's family cards are counted by our metrics; once it is deleted, free."""
    held = pod_allocation(pod, families)
    assert held is not None
    cards = {d.uuid for c in held.family_devices for d in c}
    assert cards, pod["metadata"]["annotations"]
    wait_for(
        lambda: all((shared(control_plane, u) or 0) >= 1 for u in cards),
        timeout=60,
        what="the metrics to count the pod on its cards",
    )
    name = pod["metadata"]["name"]
    kube("delete", "pod", name, "-n", namespace, "--wait=true", "--timeout=60s")
    wait_for(
        lambda: all(shared(control_plane, u) == 0 for u in cards),
        timeout=60,
        what="the cards to be counted free",
    )
