"""Each device family on the real control plane, as its vendor's device plugin runs the node.

Parametrized over the registry (hami/engine/families/registry.py): a family added there is
tested here without an edit. The node simulator registers the node as the family's vendor
plugin does (its registration annotation and handshake, its count resource allocatable: the
names the family module declares, with tests/builders.SAMPLE_CARDS' stand-in card model); a
pod asking the family's count (and memory where it has one) goes through our webhook, is
placed by kube-scheduler through our extender, bound with the allocation annotation the
vendor's plugin reads (which the simulator takes its devices from, as that plugin does), runs,
is deleted, and its card is free again for a second pod that could not fit beside it.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from hami.engine.families.base import Family
from hami.engine.families.registry import FAMILIES
from tests.builders import family_limits

from .cluster import ControlPlane, NodeSim
from .kube import Kube, wait_for
from .nodespec import family_node

pytestmark = pytest.mark.e2e

MEM = 1000  # MiB asked where the family has a memory resource


def manifest(name: str, family: Family) -> str:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"limits": family_limits(family, 1, MEM)},
                }
            ]
        },
    }
    return json.dumps(pod)


@pytest.mark.parametrize("family", FAMILIES.members, ids=lambda f: f.wire.type)
def test_a_family_pod_is_placed_bound_run_and_its_card_released(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    family: Family,
) -> None:
    wire = family.wire
    # One card shared by one task: the second pod fits only once the first is gone.
    node = family_node(f"fam-{wire.type.lower()}", family, cards=1, split=1)
    nodesim(node)
    card = node.cards[0].uuid

    kube.apply(manifest("first", family), namespace)
    kube.wait_ready(namespace, ["first"], timeout=120)
    pod = kube.pod(namespace, "first")
    # Our webhook: the pod is ours, with none of NVIDIA's node-side injection.
    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    container = pod["spec"]["containers"][0]
    assert not any(
        m["mountPath"] == "/etc/ld.so.preload" for m in container.get("volumeMounts") or ()
    )
    assert not any(e["name"].startswith("CUDA_") for e in container.get("env") or ())
    # Our bind: the family's allocation, no NVIDIA keys; the simulated plugin took its devices
    # from the to-allocate annotation and reported success.
    annotations = pod["metadata"]["annotations"]
    assert pod["spec"]["nodeName"] == node.name
    assert annotations["hami.io/vgpu-node"] == node.name
    allocated = annotations[wire.allocated_annotation]
    assert allocated.startswith(f"{card},{wire.type},"), allocated
    assert allocated.endswith(":;"), allocated
    assert annotations[wire.to_allocate_annotation] == ";"  # every entry handed out
    assert annotations["hami.io/bind-phase"] == "success"
    assert "hami.io/vgpu-devices-allocated" not in annotations
    node_annotations = kube.get("node", node.name)["metadata"].get("annotations") or {}
    assert wire.lock_name not in node_annotations

    kube.apply(manifest("second", family), namespace)

    def refused() -> list[str]:
        return [
            e.get("message") or ""
            for e in kube.pod_events(namespace, "second")
            if e.get("reason") == "FailedScheduling"
        ]

    messages = wait_for(refused, timeout=60, what="the second pod to find no room")
    # Our extender's reason, in HAMi's words: the card's one slot is taken.
    assert any("1/1 CardTimeSlicingExhausted" in m for m in messages), messages
    assert not kube.pod(namespace, "second")["spec"].get("nodeName")

    kube("delete", "pod", "first", "-n", namespace, "--wait=true", "--timeout=60s")
    kube.wait_ready(namespace, ["second"], timeout=120)
    second = kube.pod(namespace, "second")["metadata"]["annotations"]
    assert second[wire.allocated_annotation].startswith(f"{card},{wire.type},")
