"""Parity of the two worlds on the real control plane (docs/dra.md, issue 42 item 7): Lab 14's
pods (examples/lab14, Steps 4 to 7) land on the same cards as device-plugin pods on the node
under HAMi's device plugin (its stand-in's registration) and as DRA pods once the node is moved
to DRA (the registration removed, the same cards published by the simulated DRA driver under the
same UUIDs), as docs/dra.md's "Moving a node pool to DRA" does it. The scenarios are the lab's
own order and a few orders drawn with fixed seeds from pods that all fit in any order (kept few
for CI: one control plane, one node)."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from hami.engine.nvidianames import NODE_REGISTER

from .binds import allocation
from .cluster import AS_PLUGIN, ControlPlane, NodeSim
from .dradriver import SimulatedDraDriver
from .draworld import allocated_device, wait_bound
from .invariant import served
from .kube import Kube, wait_for
from .lab14 import EXAMPLES, UUIDS
from .nodespec import NodeSpec, t4_node

pytestmark = pytest.mark.e2e

WORLD = "hami.io/device-world"
# Steps 4 to 6 as the lab runs them (policy-mutex-c waits there: it is not placed in either).
LAB = [
    "policy-spread-a",
    "policy-spread-b",
    "policy-binpack-a",
    "policy-binpack-b",
    "policy-mutex-a",
    "policy-mutex-b",
]
# Pods of which any order fits the node's four cards: at most four take an idle card.
ANY_ORDER = [
    "policy-spread-a",
    "policy-spread-b",
    "policy-binpack-a",
    "policy-binpack-b",
    "policy-binpack-solo",
    "policy-mutex-a",
]
SCENARIOS = [LAB, *(random.Random(seed).sample(ANY_ORDER, len(ANY_ORDER)) for seed in (1, 2))]


def lab_pods() -> dict[str, dict[str, Any]]:
    pods = {}
    for path in sorted(EXAMPLES.glob("0*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            pods[doc["metadata"]["name"]] = doc
    return pods


def run(
    kube: Kube,
    control_plane: ControlPlane,
    dra: SimulatedDraDriver,
    namespace: str,
    node: str,
    world: str,
    names: list[str],
) -> list[str]:
    """Place `names` in order as pods of `world`; the card each got. Then remove them (and,
    for DRA, what the claim controller would: their claims) until the scheduler counts none."""
    pods, cards = lab_pods(), []
    for name in names:
        obj = copy.deepcopy(pods[name])
        if world == "dra":
            obj["metadata"].setdefault("annotations", {})[WORLD] = "dra"
        kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(obj))
        wait_bound(kube, namespace, name, node)
        if world == "dra":
            results = allocated_device(kube, namespace, f"{name}-cuda")
            assert isinstance(results, list) and len(results) == 1, results
            cards.append(UUIDS[int(str(results[0][0]).removeprefix("gpu-"))])
        else:
            _, held = allocation(kube, namespace, name)
            (uuid,) = held
            cards.append(uuid)
    kube("delete", "-n", namespace, "pods", *names, "--wait=true", timeout=120)
    if world == "dra":
        for name in names:
            dra.release(namespace, f"{name}-cuda")
    wait_for(
        lambda: not any(not u.empty for u in served(control_plane).values()),
        timeout=60,
        what="the scheduler to count no card in use",
    )
    return cards


def move(
    kube: Kube, dra: SimulatedDraDriver, node: NodeSpec, registration: str, world: str
) -> None:
    """Serve the node's cards from `world` alone: the device plugin's registration (written as
    the plugin: it is scheduling state), or the DRA driver's slice."""
    if world == "dra":
        kube("annotate", *AS_PLUGIN, "node", node.name, f"{NODE_REGISTER}-")
        dra.publish(node)
    else:
        for name in dra.published:
            kube("delete", "resourceslice", name, "--ignore-not-found")
        dra.published.clear()
        kube(
            "annotate", *AS_PLUGIN, "--overwrite", "node", node.name,
            f"{NODE_REGISTER}={registration}",
        )  # fmt: skip


def test_lab14_pods_land_on_the_same_cards_in_both_worlds(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    app_args: Callable[..., None],
) -> None:
    app_args("--dra-mode=annotated")
    node = t4_node(f"parity-{namespace[-6:]}", UUIDS)
    nodesim(node)
    registration = kube.get("node", node.name)["metadata"]["annotations"][NODE_REGISTER]
    dra = SimulatedDraDriver(kube)
    try:
        landed = []
        for names in SCENARIOS:
            move(kube, dra, node, registration, "device-plugin")
            plugin = run(kube, control_plane, dra, namespace, node.name, "device-plugin", names)
            move(kube, dra, node, registration, "dra")
            claimed = run(kube, control_plane, dra, namespace, node.name, "dra", names)
            assert claimed == plugin, names
            landed.append(plugin)
        # The lab's own order gives the write-up's cards (tests/unit/engine/test_lab14_replay).
        assert landed[0] == [UUIDS[i] for i in (3, 2, 3, 3, 1, 0)]
    finally:
        dra.close()
