"""A card both worlds serve, over-committed by kube-scheduler's DRA allocator, on the real 1.36.3
control plane (issue 42; docs/dra.md, "A card both worlds serve").

Measured here: the allocator does not see the pods HAMi's device plugin serves on a card a DRA
driver also publishes. A HAMi pod holds 10000 MiB of the card; a user's own claim asking 10000
MiB of it is allocated all the same (20000 MiB of 15360). Nothing the scheduler could write on
1.36's defaults stops that allocation; it counts both worlds, so /metrics
(`hami_gpu_overcommitted`) and `hami status` name the card and the remedy. Before, neither did.

Stand-in values: the cards (UUIDs, 15360 MiB T4s) are the node simulator's, and the slice is the
simulated HAMi-DRA driver's (tests/e2e/dradriver.py); every allocation is kube-scheduler's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.draobjects import claim_request

from .cluster import ControlPlane, NodeSim
from .dradriver import SimulatedDraDriver
from .kube import Kube, wait_for
from .nodespec import t4_node
from .prometheus import get
from .status import hami_status

pytestmark = pytest.mark.e2e


@pytest.fixture
def dra(kube: Kube) -> Iterator[SimulatedDraDriver]:
    driver = SimulatedDraDriver(kube)
    yield driver
    driver.close()


def overcommitted(control_plane: ControlPlane) -> dict[str, float]:
    body = get(control_plane.metrics_url).decode()
    return {
        s.labels["device_uuid"]: s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if s.name == "hami_gpu_overcommitted"
    }


def pod(name: str, node: str, resources: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "hami-scheduler",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "app", "image": "busybox", "resources": resources}],
            **spec,
        },
    }


def test_a_claim_the_allocator_puts_beside_device_plugin_pods_is_named_with_the_remedy(
    namespace: str,
    kube: Kube,
    control_plane: ControlPlane,
    nodesim: Callable[..., NodeSim],
    dra: SimulatedDraDriver,
) -> None:
    node = t4_node("dra-shared", ["GPU-dra-shared-0", "GPU-dra-shared-1"])
    shared = node.cards[1].uuid
    nodesim(node)
    dra.publish(node, cards=[1])
    wait_for(
        lambda: overcommitted(control_plane).get(shared) == 0,
        timeout=60,
        what="/metrics to judge the card both worlds serve",
    )
    hami_pod = pod(
        "dp", node.name, {"limits": {"nvidia.com/gpumem": "10000", "nvidia.com/gpu": "1"}}
    )
    hami_pod["metadata"]["annotations"] = {"nvidia.com/use-gpuuuid": shared}
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "own"},
        "spec": claim_request(10000, 10),
    }
    consumer = pod(
        "claimer",
        node.name,
        {"claims": [{"name": "gpu"}]},
        resourceClaims=[{"name": "gpu", "resourceClaimName": "own"}],
    )
    try:
        kube("apply", "-n", namespace, "-f", "-", stdin=json.dumps(hami_pod))
        wait_for(
            lambda: kube.pod_annotation(namespace, "dp", "hami.io/vgpu-devices-allocated"),
            timeout=60,
            what="the device-plugin pod to be placed",
        )
        kube("apply", "-n", namespace, "-f", "-", stdin=json.dumps(claim))
        kube("apply", "-n", namespace, "-f", "-", stdin=json.dumps(consumer))

        def allocated() -> list[str]:
            status = kube.get("resourceclaim", "own", namespace).get("status") or {}
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
            return [r["device"] for r in results]

        # The allocator gives the claim the card's memory the device-plugin pod holds.
        assert wait_for(allocated, timeout=60, what="kube-scheduler to allocate the claim") == [
            "gpu-1"
        ]
        wait_for(
            lambda: overcommitted(control_plane).get(shared) == 1,
            timeout=60,
            what="/metrics to flag the card over-committed",
        )
        assert node.cards[0].uuid not in overcommitted(control_plane)  # one world: not judged
        text = hami_status(kube)
        assert "OVER-COMMITTED CARDS: 1" in text, text
        assert (
            f"card {shared} on node {node.name}, served by HAMi's device plugin and a DRA driver, "
            "holds more than it has (20000 MiB counted of 15360)"
        ) in text, text
    finally:
        for name in ("dp", "claimer"):
            kube(
                "delete", "pod", name, "-n", namespace, "--force", "--grace-period=0",
                "--ignore-not-found",
            )  # fmt: skip
        dra.release(namespace, "own")
