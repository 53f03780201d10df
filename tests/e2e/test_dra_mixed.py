"""A mixed cluster on the real control plane (docs/dra.md, issue 42 item 6): one node served by
HAMi's device plugin (the node simulator's stand-in), one whose cards only a DRA driver
publishes (tests/e2e/dradriver.py's stand-in: no device plugin, no ``nvidia.com/gpu``), one
scheduler in DRA mode ``annotated``. The same pod spec, written for either world, lands by the
same card policies: the device-plugin pods on the device plugin's cards (their allocation in
the pod's annotations), the DRA pods on the driver's cards (their allocation in the claim). The
cards' UUIDs, memory and model are the stand-ins' made-up values."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from .binds import allocation
from .cluster import NodeSim
from .dradriver import SimulatedDraDriver
from .draworld import allocated_device, dra_pod, wait_bound
from .kube import Kube
from .nodespec import t4_node

pytestmark = pytest.mark.e2e

WORLD = "hami.io/device-world"


def pod_for(world: str, name: str, policy: str) -> dict[str, Any]:
    """The same GPU pod, written for `world` (only the annotation differs)."""
    pod = dra_pod(name, "4000", policy)
    if world == "dra":
        pod["metadata"]["annotations"][WORLD] = "dra"
    return pod


def test_the_same_pods_land_by_the_same_policies_in_either_world(
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    dra: SimulatedDraDriver,
    app_args: Callable[..., None],
) -> None:
    app_args("--dra-mode=annotated")
    tag = namespace[-6:]
    plugin_node = t4_node(f"mix-dp-{tag}", [f"GPU-mix-dp-{tag}-{i}" for i in range(2)])
    dra_only = replace(
        t4_node(f"mix-dra-{tag}", [f"GPU-mix-dra-{tag}-{i}" for i in range(2)]), plugin="dra"
    )
    nodesim(plugin_node, dra_only)
    dra.publish(dra_only)
    placed: dict[str, list[int]] = {"device-plugin": [], "dra": []}
    for world in placed:
        for n, policy in enumerate(("binpack", "binpack", "spread")):
            name = f"{world}-{n}"
            kube(
                "create", "-n", namespace, "-f", "-", stdin=json.dumps(pod_for(world, name, policy))
            )
            node = plugin_node if world == "device-plugin" else dra_only
            wait_bound(kube, namespace, name, node.name)
            at, cards = allocation(kube, namespace, name)
            if world == "dra":
                results = allocated_device(kube, namespace, f"{name}-cuda")
                assert isinstance(results, list) and len(results) == 1, results
                ((device, consumed),) = results
                assert consumed == {"memory": "4000Mi", "cores": "0"}, consumed
                placed[world].append(int(str(device).removeprefix("gpu-")))
                assert (at, cards) == ("", set())  # no device plugin's allocation
            else:
                assert at == node.name
                (uuid,) = cards
                placed[world].append(int(uuid.rsplit("-", 1)[1]))
                assert not kube.pod(namespace, name)["spec"].get("resourceClaims")
    # Ties go to the highest index; binpack then joins it, spread takes the idle card: in
    # both worlds alike.
    assert placed == {"device-plugin": [1, 1, 0], "dra": [1, 1, 0]}
