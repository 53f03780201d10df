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
from collections.abc import Callable

import pytest

from tests.draobjects import claim_request

from .cluster import ControlPlane, NodeSim
from .dradriver import SimulatedDraDriver
from .draworld import card_series, pod_on, resource_claim, wait_allocated, wait_placed
from .kube import Kube, wait_for
from .nodespec import t4_node
from .status import hami_status

pytestmark = pytest.mark.e2e


def overcommitted(control_plane: ControlPlane) -> dict[str, float]:
    return card_series(control_plane, "hami_gpu_overcommitted")


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
    limits = {"limits": {"nvidia.com/gpumem": "10000", "nvidia.com/gpu": "1"}}
    hami_pod = pod_on(node.name, "dp", limits)
    hami_pod["metadata"]["annotations"] = {"nvidia.com/use-gpuuuid": shared}
    claim = resource_claim("own", claim_request(10000, 10))
    consumer = pod_on(node.name, "claimer", {}, claim="own")
    try:
        kube("apply", "-n", namespace, "-f", "-", stdin=json.dumps(hami_pod))
        wait_placed(kube, namespace, "dp")
        kube("apply", "-n", namespace, "-f", "-", stdin=json.dumps(claim))
        kube("apply", "-n", namespace, "-f", "-", stdin=json.dumps(consumer))

        # The allocator gives the claim the card's memory the device-plugin pod holds.
        assert wait_allocated(kube, namespace, "own") == ["gpu-1"]
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
