"""A claim on a MIG device counted on its parent card, on the real control plane (issue 42):
NVIDIA's DRA driver publishes each MIG device beside its full GPU, `type: mig` with the full
GPU's UUID as `parentUUID`; kube-scheduler allocates a MIG claim there, and HAMi's next pod
sees the parent card in use. Before, the MIG device was no card and its claim held nothing:
the parent looked idle to spread, binpack and mutex, and to the device plugin's pods.

Stand-in values: the cards (UUIDs, 15360 MiB) are the node simulator's; the slice is written
by the test with the attributes NVIDIA's driver publishes (k8s-dra-driver-gpu,
`CommonAttributesMig`; no driver runs); every allocation is kube-scheduler's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.draobjects import MIB, resource_slice

from .cluster import ControlPlane, NodeSim
from .dradriver import SimulatedDraDriver
from .draworld import (
    card_series,
    device_class,
    pod_on,
    resource_claim,
    wait_allocated,
    wait_placed,
)
from .kube import Kube, wait_for
from .nodespec import t4_node

pytestmark = pytest.mark.e2e

NVIDIA = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
MIG_MIB = 4864  # an A100's 1g.5gb instance
MEMORY = "hami_gpu_memory_allocated_bytes"


def nvidia_slice(node: str, parent: str) -> dict[str, Any]:
    """NVIDIA's driver's slice for one card: the full GPU and one static MIG device on it."""
    attributes = {"productName": {"string": "NVIDIA A100-SXM4-40GB"}}
    full = {
        "name": "gpu-1",
        "attributes": {**attributes, "type": {"string": "gpu"}, "uuid": {"string": parent}},
        "capacity": {"memory": {"value": str(15360 * MIB)}},
    }
    mig = {
        "name": "gpu-1-mig-1g5gb-19-0",
        "attributes": {
            **attributes,
            "type": {"string": "mig"},
            "uuid": {"string": f"MIG-{parent}"},
            "parentUUID": {"string": parent},
            "profile": {"string": "1g.5gb"},
        },
        "capacity": {"memory": {"value": str(MIG_MIB * MIB)}},
    }
    obj = resource_slice(node, [full, mig], driver=NVIDIA, name=f"{node}-nvidia")
    del obj["metadata"]["uid"]
    return obj


def mig_class() -> dict[str, Any]:
    selector = f'device.driver == "{NVIDIA}" && device.attributes["{NVIDIA}"].type == "mig"'
    return device_class(MIG_CLASS, selector)


def test_a_mig_claim_holds_its_parent_card(
    namespace: str,
    kube: Kube,
    control_plane: ControlPlane,
    nodesim: Callable[..., NodeSim],
    dra: SimulatedDraDriver,
) -> None:
    node = t4_node("dra-mig", ["GPU-dra-mig-0", "GPU-dra-mig-1"])
    free, parent = (c.uuid for c in node.cards)
    nodesim(node)
    kube.apply(json.dumps(nvidia_slice(node.name, parent)))
    kube.apply(json.dumps(mig_class()))
    request = {"name": "mig", "exactly": {"deviceClassName": MIG_CLASS}}
    claim = resource_claim("mig", {"devices": {"requests": [request]}})
    kube("apply", "-n", namespace, "-f", "-", stdin=json.dumps(claim))
    user = pod_on(node.name, "mig-user", {}, claim="mig")
    probe = pod_on(
        node.name, "probe", {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}}
    )
    probe["metadata"]["annotations"] = {"hami.io/gpu-scheduler-policy": "spread"}
    try:
        kube("apply", "-n", namespace, "-f", "-", stdin=json.dumps(user))

        assert wait_allocated(kube, namespace, "mig") == ["gpu-1-mig-1g5gb-19-0"]
        wait_for(
            lambda: card_series(control_plane, MEMORY).get(parent) == MIG_MIB * MIB,
            timeout=60,
            what="/metrics to count the MIG instance's memory on its parent card",
        )
        # spread takes the least used card; with the parent idle, the tie goes to its index 1.
        kube("apply", "-n", namespace, "-f", "-", stdin=json.dumps(probe))
        written = wait_placed(kube, namespace, "probe")
        assert written.startswith(f"{free},"), written
    finally:
        for name in ("mig-user", "probe"):
            kube(
                "delete", "pod", name, "-n", namespace, "--force", "--grace-period=0",
                "--ignore-not-found",
            )  # fmt: skip
        dra.release(namespace, "mig")
        kube("delete", "resourceslice", f"{node.name}-nvidia", "--ignore-not-found")
        kube("delete", "deviceclass", MIG_CLASS, "--ignore-not-found")
