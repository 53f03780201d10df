"""Each device family on the real control plane, as its vendor's device plugin runs the node.

Parametrized over the registry (hami/engine/families/registry.py): a family added there is
tested here without an edit. The node simulator registers the node as the family's vendor
plugin does: the node annotations, allocatable resources and labels of
tests/families_samples.py where the family has a sample there, else its registration of
tests/builders.SAMPLE_CARDS' stand-in card with its handshake and count resource. A pod
asking for one of the family's devices goes through our webhook, is placed by kube-scheduler
through our extender and bound with the allocation annotation the vendor's plugin reads
(where that plugin follows HAMi's lock protocol, the simulator takes its devices from the
to-allocate annotation and reports success, as the plugin does), runs, is deleted, and its
card is counted free again in our metrics; a second pod then runs.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from hami.engine.families.ascend.device import MODE_ANNOTATION, NODE_SOFT_ANNOTATION, SOFT
from hami.engine.families.base import Family
from hami.engine.families.registry import Families
from hami.engine.inventory import pod_allocation
from tests.builders import FAMILIES, family_limits

from .cluster import ControlPlane, NodeSim
from .kube import Kube, wait_for
from .nodespec import family_node

pytestmark = pytest.mark.e2e

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


@pytest.mark.parametrize("family", FAMILIES.others, ids=lambda f: f.wire.type)
def test_a_family_pod_is_placed_bound_run_and_its_card_released(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    family: Family,
) -> None:
    wire = family.wire
    node = family_node(f"fam-{wire.type.lower()}", family, cards=1, split=1)
    nodesim(node)

    kube.apply(manifest("first", family), namespace)
    kube.wait_ready(namespace, ["first"], timeout=60)
    pod = kube.pod(namespace, "first")
    # Our webhook: the pod is ours, with none of NVIDIA's node-side injection.
    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    container = pod["spec"]["containers"][0]
    assert not any(
        m["mountPath"] == "/etc/ld.so.preload" for m in container.get("volumeMounts") or ()
    )
    assert not any(e["name"].startswith("CUDA_") for e in container.get("env") or ())
    # Our bind: the family's allocation annotation, no NVIDIA keys, and HAMi's lock left free
    # (released by the plugin that reads it, never taken for one that does not).
    annotations = pod["metadata"]["annotations"]
    assert pod["spec"]["nodeName"] == node.name
    assert annotations["hami.io/vgpu-node"] == node.name
    assert annotations.get(wire.allocated_annotation), annotations
    assert "hami.io/vgpu-devices-allocated" not in annotations
    node_annotations = kube.get("node", node.name)["metadata"].get("annotations") or {}
    assert "hami.io/mutex.lock" not in node_annotations
    counted_then_released(control_plane, kube, namespace, pod)
    kube.apply(manifest("second", family), namespace)
    kube.wait_ready(namespace, ["second"], timeout=120)
    second = kube.pod(namespace, "second")["metadata"]["annotations"]
    assert second.get(wire.allocated_annotation), second


def test_an_ascend_soft_split_pod_past_the_registered_cores_binds(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
) -> None:
    """An Ascend 910B3 node offering the soft split (`hami-vnpu-core: "true"`, NPUs registered
    with 20 AI cores): a `huawei.com/vnpu-mode: hami-core` pod asking 30 % of an NPU's cores is
    bound and runs. The fit counts a card as 100 cores on the soft split and /bind's re-check
    asks the same rule; it counted the registered 20 and refused the pod filter chose
    ("30 % of the cores counted of 20"), so kube-scheduler looped filter, bind refused."""
    family = FAMILIES.by_type()["Ascend910B3"]
    node = replace(
        family_node("fam-ascend-soft", family, cards=1, split=1),
        annotations={NODE_SOFT_ANNOTATION: "true"},
    )
    nodesim(node)
    names = family.wire.resources
    limits = {names.count: "1", names.memory: "1024", names.cores: "30"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "soft", "annotations": {MODE_ANNOTATION: SOFT}},
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}]
        },
    }
    kube.apply(json.dumps(pod), namespace)
    kube.wait_ready(namespace, ["soft"], timeout=60)
    bound = kube.pod(namespace, "soft")
    assert bound["spec"]["nodeName"] == node.name
    held = pod_allocation(bound, FAMILIES)
    assert held is not None
    assert [d.usedcores for c in held.family_devices for d in c] == [30]
