"""One GPU pod end to end: webhook, scheduler extender filter/bind, device plugin, Ready."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tests.e2e.binds import SMOKE_POD

from .cluster import REPO_ROOT, SCHEDULER_NAME, ControlPlane, NodeSim
from .kube import Kube
from .nodespec import t4_node

pytestmark = pytest.mark.e2e


def test_gpu_pod_is_admitted_scheduled_allocated_and_ready(
    kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    node = t4_node("node-a")
    nodesim(node)

    kube.apply(SMOKE_POD, namespace)

    pod = kube.pod(namespace, "smoke")
    assert pod["spec"]["schedulerName"] == SCHEDULER_NAME, "the webhook did not claim the pod"
    kube.wait_ready(namespace, ["smoke"])

    pod = kube.pod(namespace, "smoke")
    annotations = pod["metadata"]["annotations"]
    assert pod["spec"]["nodeName"] == node.name
    # Written by our /filter decision and /bind: the device plugin found its devices there.
    allocated = annotations["hami.io/vgpu-devices-allocated"]
    assert re.fullmatch(r"GPU-[^,]+,NVIDIA,1000,0:;", allocated), allocated
    assert allocated.split(",")[0] in {card.uuid for card in node.cards}
    assert annotations["hami.io/bind-phase"] == "success"
    assert annotations["hami.io/bind-time"].isdigit()
    assert annotations["hami.io/vgpu-devices-to-allocate"] == ";"
    # The node lock taken by /bind was handed back by the device plugin.
    node_annotations = kube.get("node", node.name)["metadata"].get("annotations", {})
    assert "hami.io/mutex.lock" not in node_annotations
    scheduled = [e for e in kube.pod_events(namespace, "smoke") if e.get("reason") == "Scheduled"]
    assert scheduled, "kube-scheduler recorded no Scheduled event"


def test_the_control_plane_started_within_what_the_docs_say(
    control_plane: ControlPlane,
) -> None:
    development = (REPO_ROOT / "docs" / "development.md").read_text()
    bound = re.search(r"and up to (\d+) s while other work loads it", development)
    assert bound is not None, "docs/development.md's Testing section no longer gives the bound"
    assert control_plane.timings["total"] <= int(bound.group(1)), control_plane.timings
