"""Parity of the two worlds on the real control plane (docs/dra.md, issue 42 item 7): Lab 14's
pods (examples/lab14, Steps 4 to 8) land on the same cards as device-plugin pods on the node
under HAMi's device plugin (its stand-in's registration) and as DRA pods once the node is moved
to DRA (the registration removed, the same cards published by the simulated DRA driver under the
same UUIDs), as docs/dra.md's "Moving a node pool to DRA" does it. The scenarios are the lab's
own orders (Steps 4 to 6, then Step 7 from a clean node) and a few orders drawn with fixed seeds
from pods that all fit in any order (kept few for CI: one control plane, one node).

In DRA mode the test also plays Step 6's blocking and release (the device-plugin world's is
tests/e2e/test_lab14.py's) and reads Step 8's score lines in both worlds."""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from hami.engine.dra.translate import GATE
from hami.engine.nvidianames import NODE_REGISTER
from tests import applog
from tests.reference.lab14 import STEP_8_SCORES

from .binds import allocation
from .cluster import AS_PLUGIN, ControlPlane, NodeSim
from .dradriver import SimulatedDraDriver
from .draworld import WORLD, allocated_device, wait_bound
from .invariant import served
from .kube import Kube, eventually, wait_for
from .lab14 import EXAMPLES, UUIDS
from .labtext import event_rows
from .nodespec import NodeSpec, t4_node

pytestmark = pytest.mark.e2e

# Steps 4 to 6 as the lab runs them (policy-mutex-c, which waits there, is played in DRA mode
# by blocked_then_released).
LAB = [
    "policy-spread-a",
    "policy-spread-b",
    "policy-binpack-a",
    "policy-binpack-b",
    "policy-mutex-a",
    "policy-mutex-b",
]
# Step 7 on a clean node: a tenant, the two mutex,binpack pods, the binpack contrast.
COMPOSED = ["policy-tenant", "policy-combined-a", "policy-combined-b", "policy-binpack-solo"]
# Pods of which any order fits the node's four cards: at most four take an idle card.
ANY_ORDER = [
    "policy-spread-a",
    "policy-spread-b",
    "policy-binpack-a",
    "policy-binpack-b",
    "policy-binpack-solo",
    "policy-mutex-a",
]
SCENARIOS = [
    LAB,
    COMPOSED,
    *(random.Random(seed).sample(ANY_ORDER, len(ANY_ORDER)) for seed in (1, 2)),
]
# Step 6's sentence: kube-scheduler's for the device-plugin pod, the placer's for the DRA pod.
BLOCKED = "0/1 nodes are available: 1 4/4 ExclusiveDeviceAllocateConflict."


def lab_pods() -> dict[str, dict[str, Any]]:
    pods = {}
    for path in sorted(EXAMPLES.glob("0*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            pods[doc["metadata"]["name"]] = doc
    return pods


def create(kube: Kube, namespace: str, world: str, name: str) -> None:
    obj = copy.deepcopy(lab_pods()[name])
    if world == "dra":
        obj["metadata"].setdefault("annotations", {})[WORLD] = "dra"
    kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(obj))


def card(kube: Kube, namespace: str, world: str, name: str) -> str:
    """The card the bound pod got: its claim's device (DRA) or its annotation."""
    if world == "dra":
        results = allocated_device(kube, namespace, f"{name}-cuda")
        assert isinstance(results, list) and len(results) == 1, results
        return UUIDS[int(str(results[0][0]).removeprefix("gpu-"))]
    _, held = allocation(kube, namespace, name)
    (uuid,) = held
    return uuid


def place(kube: Kube, namespace: str, node: str, world: str, names: list[str]) -> list[str]:
    """Place `names` in order as pods of `world`; the card each got."""
    cards = []
    for name in names:
        create(kube, namespace, world, name)
        wait_bound(kube, namespace, name, node)
        cards.append(card(kube, namespace, world, name))
    return cards


def clear(
    kube: Kube,
    control_plane: ControlPlane,
    dra: SimulatedDraDriver,
    namespace: str,
    world: str,
    names: list[str],
) -> None:
    """Remove the pods (and, for DRA, what the claim controller would: their claims) until the
    scheduler counts none."""
    kube("delete", "-n", namespace, "pods", *names, "--wait=true", timeout=120)
    if world == "dra":
        for name in names:
            dra.release(namespace, f"{name}-cuda")
    wait_for(
        lambda: not any(not u.empty for u in served(control_plane).values()),
        timeout=60,
        what="the scheduler to count no card in use",
    )


def scores(control_plane: ControlPlane, pod: str, since: int) -> str:
    """The card score lines of the last decision logged for `pod` past the log's first `since`
    characters (Step 8's grep)."""
    records = applog.records(control_plane.app_log.read_text()[since:])
    starts = [i for i, r in enumerate(records) if r["msg"] == "card scores" and r.get("pod") == pod]
    lines = []
    for r in records[starts[-1] + 1 :] if starts else ():
        if "computer score" not in r["msg"]:
            break
        lines.append(f"{r['msg']}\n")
    return "".join(lines)


def explain(control_plane: ControlPlane, namespace: str, pod: str) -> list[str]:
    argv = [sys.executable, "-m", "hami", "explain", f"{namespace}/{pod}"]
    argv += ["--kubeconfig", str(control_plane.kubeconfig)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.splitlines()


def blocked_then_released(
    kube: Kube, control_plane: ControlPlane, dra: SimulatedDraDriver, namespace: str, node: str
) -> None:
    """Step 6's end in DRA mode: with every card holding a user policy-mutex-c stays gated, its
    Events and `hami explain` saying why in the extender's words; deleting policy-spread-b (and
    its claim, as the claim controller would) lets it take exactly that card."""
    create(kube, namespace, "dra", "policy-mutex-c")
    rows = {
        ("Warning", "FailedScheduling", "hami-scheduler", BLOCKED),
        ("Warning", "FilteringFailed", "hami-scheduler", f"1 nodes ExclusiveDeviceAllocateConflict({node})"),
    }  # fmt: skip

    def told() -> None:
        assert event_rows(kube("describe", "pod", "-n", namespace, "policy-mutex-c").stdout) == rows

    eventually(told, timeout=60)
    lines = explain(control_plane, namespace, "policy-mutex-c")
    assert f"  it waits for the DRA placer (scheduling gate {GATE})" in lines, lines
    assert f"  {BLOCKED}" in lines, lines
    assert f"  {node}: 4/4 ExclusiveDeviceAllocateConflict" in lines, lines
    spec = kube.pod(namespace, "policy-mutex-c")["spec"]
    assert not spec.get("nodeName") and {"name": GATE} in spec["schedulingGates"]

    kube("delete", "-n", namespace, "pod", "policy-spread-b", "--wait=true", timeout=90)
    dra.release(namespace, "policy-spread-b-cuda")
    wait_bound(kube, namespace, "policy-mutex-c", node)
    assert card(kube, namespace, "dra", "policy-mutex-c") == UUIDS[2]  # spread-b's card


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
    dra: SimulatedDraDriver,
) -> None:
    app_args("--dra-mode=annotated")
    node = t4_node(f"parity-{namespace[-6:]}", UUIDS)
    nodesim(node)
    registration = kube.get("node", node.name)["metadata"]["annotations"][NODE_REGISTER]
    solo = "policy-binpack-solo"
    landed = []
    for names in SCENARIOS:
        move(kube, dra, node, registration, "device-plugin")
        since = len(control_plane.app_log.read_text())
        plugin = place(kube, namespace, node.name, "device-plugin", names)
        logged = scores(control_plane, solo, since) if names is COMPOSED else ""
        clear(kube, control_plane, dra, namespace, "device-plugin", names)
        move(kube, dra, node, registration, "dra")
        since = len(control_plane.app_log.read_text())
        claimed = place(kube, namespace, node.name, "dra", names)
        assert claimed == plugin, names
        if names is LAB:
            blocked_then_released(kube, control_plane, dra, namespace, node.name)
            names = [n for n in names if n != "policy-spread-b"] + ["policy-mutex-c"]
        if names is COMPOSED:
            # Step 8: the placer's decision logs the extender's lines, the write-up's scores.
            assert logged == STEP_8_SCORES
            assert scores(control_plane, solo, since) == STEP_8_SCORES
        clear(kube, control_plane, dra, namespace, "dra", names)
        landed.append(plugin)
    # The lab's own orders give the write-up's cards (tests/unit/engine/test_lab14_replay).
    assert landed[0] == [UUIDS[i] for i in (3, 2, 3, 3, 1, 0)]
    assert landed[1] == [UUIDS[i] for i in (3, 2, 1, 3)]
