"""A mixed burst and a leader hand-over in the middle of it (docs/dra.md, issue 42 item 7): two
scheduler replicas in DRA mode (tests/e2e/replicas.py), nodes under HAMi's device plugin
stand-in and nodes whose cards only the simulated DRA driver publishes, a bounded burst of
device-plugin and DRA pods; the leader's pod is deleted mid-burst. Afterwards every pod is bound
and, from a fresh LIST of pods, claims and slices, no card holds more than its capacity.

The replicas serve the profile ``hami-ha``, which the plane's own webhook leaves alone: the DRA
pods are created as DRA mode's webhook stores them (translated here by the same admission
code), which is what the replicas' placers read."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from hami.engine.admission import AdmissionConfig
from hami.engine.dra.config import DraConfig
from hami.engine.dra.translate import GATE
from hami.engine.jsonpatch import apply
from hami.service.admission import AdmissionService
from tests.builders import FAMILIES

from . import invariant
from .cluster import ControlPlane, NodeSim
from .dradriver import SimulatedDraDriver
from .draworld import allocated_device, gpu_pod
from .kube import Kube, wait_for
from .nodespec import NodeSpec, t4_node
from .replicas import HA_SCHEDULER, lease_holder, replicas

pytestmark = pytest.mark.e2e

COUNT = 16  # pods of each world: 4000 MiB each, 3 to a T4, 24 places per world
MEMORY = "4000"


def stored_dra_pod(name: str, namespace: str) -> dict[str, Any]:
    """The pod as DRA mode's webhook stores it: gated, its request in its record."""
    written = gpu_pod(name, MEMORY, world="dra", scheduler=HA_SCHEDULER)
    review = {
        "uid": name,
        "kind": {"kind": "Pod"},
        "namespace": namespace,
        "operation": "CREATE",
        "object": written,
    }
    config = AdmissionConfig(families=FAMILIES, scheduler_name=HA_SCHEDULER)
    outcome = AdmissionService(config, dra=DraConfig("annotated")).review(review)
    assert outcome.allowed, outcome
    stored: dict[str, Any] = apply(written, outcome.patch)
    assert stored["spec"]["schedulingGates"] == [{"name": GATE}], stored
    return stored


def test_a_leader_deleted_during_a_mixed_burst_leaves_no_card_over_capacity(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
) -> None:
    dra = SimulatedDraDriver(kube)
    try:
        tag = namespace[-6:]
        plugin_nodes = [
            NodeSpec(n.name, n.cards, n.split, allocate_delay=0.2)
            for n in (
                t4_node(f"ho-dp-{tag}-{i}", [f"GPU-ho-dp-{tag}-{i}-{c}" for c in range(4)])
                for i in range(2)
            )
        ]
        dra_nodes = [
            replace(
                t4_node(f"ho-dra-{tag}-{i}", [f"GPU-ho-dra-{tag}-{i}-{c}" for c in range(4)]),
                plugin="dra",
            )
            for i in range(2)
        ]
        nodesim(*plugin_nodes, *dra_nodes)
        for n in dra_nodes:
            dra.publish(n)
        with replicas(
            control_plane, namespace, "dra-a", "dra-b", app_args=("--dra-mode=annotated",)
        ) as (old, new):
            names: list[str] = []

            def bound_worlds() -> set[str]:
                listed = json.loads(kube("get", "pods", "-n", namespace, "-o", "json").stdout)
                return {
                    p["metadata"]["name"].split("-")[0]
                    for p in listed["items"]
                    if p["spec"].get("nodeName")
                }

            for i in range(COUNT):
                for world, obj in (
                    ("dp", gpu_pod(f"dp-{i:02d}", MEMORY, scheduler=HA_SCHEDULER)),
                    ("dra", stored_dra_pod(f"dra-{i:02d}", namespace)),
                ):
                    kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(obj))
                    names.append(f"{world}-{i:02d}")
                if i == COUNT // 2:
                    # Mid-burst, once the leader has bound pods of both worlds, its pod is
                    # deleted as a rolling upgrade does.
                    wait_for(
                        lambda: {"dp", "dra"} <= bound_worlds(),
                        timeout=120,
                        what="the first leader to bind pods of both worlds",
                    )
                    old.delete(pre_stop=5)

            def unbound() -> list[str]:
                return [n for n in names if not kube.pod(namespace, n)["spec"].get("nodeName")]

            wait_for(lambda: not unbound(), timeout=300, what="every pod to be bound")
            assert lease_holder(control_plane, namespace).startswith(new.name + "_")
            kube.wait_ready(namespace, names, timeout=120)
        on_dra = {n.name for n in dra_nodes}
        for name in names:
            node = kube.pod(namespace, name)["spec"]["nodeName"]
            if name.startswith("dra-"):
                assert node in on_dra, (name, node)
                assert allocated_device(kube, namespace, f"{name}-cuda") != [], name
            else:
                assert node not in on_dra, (name, node)
        assert invariant.overcommitted(kube) == []
        assert invariant.misplaced(kube, namespace) == []
    finally:
        for name in kube("get", "resourceclaims", "-n", namespace, "-o", "name").stdout.split():
            dra.release(namespace, name.split("/", 1)[1])
        dra.close()
