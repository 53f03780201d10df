"""Hygon DCUs under DRA on the real control plane (docs/dra.md, "The DRA view"): the placer
chooses a Hygon pod's DCU by hami.io/gpu-scheduler-policy among the DCUs driver
`dra.hygon.com` publishes, pins its claim, and kube-scheduler allocates that DCU; an NVIDIA
pod, a Hygon pod and a pod asking both land on one node each on its family's devices; a Hygon
GPU pod's own claim of `dra.hygon.com` is admitted (its DCU is counted) and allocated. The
DCUs and GPUs are the simulated driver's (tests/e2e/dradriver.py: made-up UUIDs, memory and
models); no device plugin serves the nodes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from hami.engine.dra.translate import GATE
from hami.engine.families.hygon import TYPE as DCU
from hami.engine.quantity import parse_quantity
from tests.draobjects import claim_request

from .cluster import NodeSim
from .dradriver import SimulatedDraDriver, dcu_name
from .draworld import allocated_device, wait_bound
from .kube import Kube, eventually
from .labtext import event_rows
from .nodespec import NodeSpec, t4_node

pytestmark = pytest.mark.e2e

DCU_ASK = {"hygon.com/dcunum": "1", "hygon.com/dcumem": "4000", "hygon.com/dcucores": "30"}
GPU_ASK = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}


@pytest.fixture
def dra(kube: Kube, app_args: Callable[..., None]) -> Iterator[SimulatedDraDriver]:
    driver = SimulatedDraDriver(kube)
    app_args("--dra-mode=all")
    yield driver
    driver.close()


def dra_only(name: str, cards: int) -> NodeSpec:
    """A node whose cards only a DRA driver publishes (no device plugin, no extended resource)."""
    return replace(t4_node(name, [f"{name}-{i}" for i in range(cards)]), plugin="dra")


def gpus_and_dcus(name: str, nodesim: Callable[..., NodeSim], dra: SimulatedDraDriver) -> NodeSpec:
    """A DRA-only node of two cards, published both as NVIDIA's GPUs and as Hygon's DCUs."""
    node = dra_only(name, 2)
    nodesim(node)
    dra.publish(node)
    dra.publish(node, family=DCU)
    return node


def pod(name: str, policy: str, **containers: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"hami.io/gpu-scheduler-policy": policy}},
        "spec": {
            "containers": [
                {"name": c, "image": "busybox", "resources": {"limits": limits}}
                for c, limits in containers.items()
            ]
        },
    }


def create(kube: Kube, namespace: str, obj: dict[str, Any]) -> None:
    kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(obj))


def test_a_hygon_pods_dcu_follows_its_policy(
    kube: Kube, namespace: str, nodesim: Callable[..., NodeSim], dra: SimulatedDraDriver
) -> None:
    node = dra_only(f"dcu-{namespace[-6:]}", 2)
    nodesim(node)
    dra.publish(node, family=DCU)
    landed = {}
    for name, policy in (("first", "binpack"), ("packed", "binpack"), ("spread", "spread")):
        create(kube, namespace, pod(name, policy, dcu=DCU_ASK))
        wait_bound(kube, namespace, name, node.name)
        landed[name] = allocated_device(kube, namespace, f"{name}-dcu")
    # Ties go to the highest index (the higher PCI address); binpack then joins it, spread
    # takes the other. 30 percent of a card of 120 compute units is 36 of them.
    consumed = {"memory": "4000Mi", "cores": "36", "slices": "1"}
    assert landed == {
        "first": [(dcu_name(1), consumed)],
        "packed": [(dcu_name(1), consumed)],
        "spread": [(dcu_name(0), consumed)],
    }


def test_nvidia_and_hygon_pods_share_a_node_each_on_its_familys_devices(
    kube: Kube, namespace: str, nodesim: Callable[..., NodeSim], dra: SimulatedDraDriver
) -> None:
    node = gpus_and_dcus(f"mix-{namespace[-6:]}", nodesim, dra)
    for name, containers in (
        ("gpu", {"cuda": GPU_ASK}),
        ("dcu", {"dcu": DCU_ASK}),
        ("both", {"cuda": GPU_ASK, "dcu": DCU_ASK}),
    ):
        create(kube, namespace, pod(name, "binpack", **containers))
        wait_bound(kube, namespace, name, node.name)
    gpu = {"memory": "3000Mi", "cores": "0"}
    dcu = {"memory": "4000Mi", "cores": "36", "slices": "1"}
    assert allocated_device(kube, namespace, "gpu-cuda") == [("gpu-1", gpu)]
    assert allocated_device(kube, namespace, "dcu-dcu") == [(dcu_name(1), dcu)]
    assert allocated_device(kube, namespace, "both-cuda") == [("gpu-1", gpu)]
    assert allocated_device(kube, namespace, "both-dcu") == [(dcu_name(1), dcu)]


def test_a_gpu_pods_own_dcu_claim_is_admitted_and_allocated(
    kube: Kube, namespace: str, nodesim: Callable[..., NodeSim], dra: SimulatedDraDriver
) -> None:
    # The bookkeeping counts what a dra.hygon.com claim holds on its DCU, so the webhook
    # admits it on an NVIDIA GPU pod (whose claims it judges) as it does NVIDIA's classes
    # (before: refused as an uncounted GPU claim, hami.runtime.config.device_classes).
    node = gpus_and_dcus(f"own-{namespace[-6:]}", nodesim, dra)
    own = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "own-dcu"},
        "spec": claim_request(2000, 20, device_class_name="dra.hygon.com"),
    }
    create(kube, namespace, own)
    sidecar = pod("sidecar", "binpack", cuda=GPU_ASK, tool={})
    sidecar["spec"]["containers"][1]["resources"] = {"claims": [{"name": "own"}]}
    sidecar["spec"]["resourceClaims"] = [{"name": "own", "resourceClaimName": "own-dcu"}]
    try:
        create(kube, namespace, sidecar)
        wait_bound(kube, namespace, "sidecar", node.name)
        assert allocated_device(kube, namespace, "sidecar-cuda") == [
            ("gpu-1", {"memory": "3000Mi", "cores": "0"})
        ]
        held = allocated_device(kube, namespace, "own-dcu")
        assert isinstance(held, list) and len(held) == 1, held
        device, consumed = held[0]
        assert device in {dcu_name(0), dcu_name(1)} and consumed["cores"] == "20"
        assert parse_quantity(consumed["memory"]) == 2000 * 2**20
    finally:
        kube("delete", "pod", "sidecar", "-n", namespace, "--force", "--grace-period=0")
        dra.release(namespace, "own-dcu")


def test_a_dcu_takes_as_many_pods_as_its_driver_publishes_slices(
    kube: Kube, namespace: str, nodesim: Callable[..., NodeSim], dra: SimulatedDraDriver
) -> None:
    """Hygon's driver publishes `slices: 4` (each claim consuming 1): the placer bounds the
    DCU's pods by it, so a fifth pod with room left in memory and cores waits, gated, with
    HAMi's reason, instead of being pinned to a card kube-scheduler's allocator refuses."""
    node = dra_only(f"sl-{namespace[-6:]}", 1)
    nodesim(node)
    dra.publish(node, family=DCU)
    small = {"hygon.com/dcunum": "1", "hygon.com/dcumem": "1000", "hygon.com/dcucores": "10"}
    for i in range(4):
        create(kube, namespace, pod(f"p{i}", "binpack", dcu=small))
        wait_bound(kube, namespace, f"p{i}", node.name)
    create(kube, namespace, pod("fifth", "binpack", dcu=small))
    failed = ("Warning", "FilteringFailed", "hami-scheduler")

    def told() -> None:
        rows = event_rows(kube("describe", "pod", "-n", namespace, "fifth").stdout)
        assert any(r[:3] == failed and "CardTimeSlicingExhausted" in r[3] for r in rows), rows

    eventually(told, timeout=60)
    spec = kube.pod(namespace, "fifth")["spec"]
    assert not spec.get("nodeName") and {"name": GATE} in spec["schedulingGates"]
