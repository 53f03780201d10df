"""`nvidia.com/gpu` on Kubernetes 1.36 with a DeviceClass that maps it (`extendedResourceName`,
KEP-5004, beta and on by default), on the real control plane (issue 42 item 7; docs/dra.md,
"A DeviceClass that serves nvidia.com/gpu").

Measured on kube-scheduler 1.36.3 before this test's change: once such a class exists, every
pod asking `nvidia.com/gpu` goes through kube-scheduler's DRA extended-resource check on every
node, which fails each node with "cannot fit resource" for the `nvidia.com/gpucores` or
`nvidia.com/gpumem` HAMi's webhook writes (no node advertises them; the extender's
`ignoredByScheduler` does not reach that check), and no claim is made: HAMi's pods waited
forever, on device-plugin nodes too. The webhook now refuses such a pod at creation, naming the
class and what to do; without the mapping the same pod is placed as before.

Stand-in values: the node and its cards are the node simulator's; the slice and the class are
the simulated HAMi-DRA driver's (tests/e2e/dradriver.py) with the mapping added by the test.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from tests.draobjects import device_class

from .cluster import ControlPlane, NodeSim
from .dradriver import SimulatedDraDriver
from .draworld import (
    allocated_device,
    card_series,
    gpu_pod,
    wait_bound,
    whole,
)
from .draworld import device_class as hami_dra_class
from .kube import Kube, KubectlError, wait_for
from .nodespec import T4_MEMORY_MIB as T4_MIB
from .nodespec import t4_node

pytestmark = pytest.mark.e2e

GPU = "nvidia.com/gpu"
MIB = 2**20


def refusal(kube: Kube, namespace: str, pod: dict[str, Any], dry_run: bool) -> str:
    """kube-apiserver's answer to creating the pod: "" where it was admitted."""
    extra = ["--dry-run=server"] if dry_run else []
    try:
        kube("create", "-n", namespace, *extra, "-f", "-", stdin=json.dumps(pod))
    except KubectlError as e:
        return e.result.stderr
    return ""


def test_a_pod_kube_scheduler_would_serve_through_the_mapping_is_refused_naming_the_class(
    namespace: str, kube: Kube, nodesim: Callable[..., NodeSim], dra: SimulatedDraDriver
) -> None:
    node = t4_node("ext-both", ["GPU-ext-both-0", "GPU-ext-both-1"])
    nodesim(node)
    dra.publish(node)  # the same cards under a DRA driver too, as while a pool moves
    mapped = device_class(extended_resource=GPU)
    name = mapped["metadata"]["name"]
    kube.apply(json.dumps(mapped))
    pod = gpu_pod("whole", "2000", node=node.name)
    # The cache sees the class through its watch: a dry run is refused once it has.
    said = wait_for(
        lambda: refusal(kube, namespace, pod, dry_run=True),
        timeout=60,
        what="the webhook to refuse the pod while a DeviceClass maps nvidia.com/gpu",
    )
    assert f"DeviceClass {name} serves {GPU} through DRA" in said, said
    assert "for nvidia.com/gpumem, which no node" in said and "dra.enabled=true" in said, said
    assert refusal(kube, namespace, pod, dry_run=False) == said
    # The mapping removed, the same pod is admitted and placed by HAMi's device-plugin path.
    kube.apply(json.dumps(device_class()))
    wait_for(
        lambda: not refusal(kube, namespace, pod, dry_run=True),
        timeout=60,
        what="the webhook to admit the pod once no DeviceClass maps nvidia.com/gpu",
    )
    assert refusal(kube, namespace, pod, dry_run=False) == ""
    written = wait_for(
        lambda: kube.pod_annotation(namespace, "whole", "hami.io/vgpu-devices-allocated"),
        timeout=60,
        what="the pod to be placed",
    )
    assert written is not None and written.startswith("GPU-ext-both-"), written
    kube("delete", "pod", "whole", "-n", namespace, "--wait=false")


@pytest.mark.usefixtures("dra_mode")
def test_dra_mode_places_the_pod_through_its_own_claim_while_the_class_maps_it(
    kube: Kube,
    namespace: str,
    dra_node: Callable[[str, int], list[str]],
) -> None:
    dra_node("ext-dra-mode", 2)
    plain = hami_dra_class("hami-core-gpu.project-hami.io")
    mapped = {**plain, "spec": {**plain["spec"], "extendedResourceName": GPU}}
    kube.apply(json.dumps(mapped))
    try:
        pod = gpu_pod("mapped", "4000", policy="binpack")
        # Admitted even once the cache has seen the mapping (a dry run is judged the same way).
        wait_for(
            lambda: kube.get("deviceclass", mapped["metadata"]["name"])["spec"].get(
                "extendedResourceName"
            ),
            timeout=30,
            what="the mapping to be stored",
        )
        assert refusal(kube, namespace, pod, dry_run=False) == ""
        wait_bound(kube, namespace, "mapped", "ext-dra-mode")
        # Ties go to the highest index; the claim is the placer's, none is kube-scheduler's.
        assert allocated_device(kube, namespace, "mapped-cuda") == whole("gpu-1:4000")
        claims = kube("get", "resourceclaims", "-n", namespace, "-o", "name").stdout.split()
        assert claims == ["resourceclaim.resource.k8s.io/mapped-cuda"], claims
    finally:
        kube.apply(json.dumps(plain))


def memory_allocated(control_plane: ControlPlane, uuids: list[str]) -> int:
    """MiB counted on the cards now (hami_gpu_memory_allocated_bytes)."""
    found = card_series(control_plane, "hami_gpu_memory_allocated_bytes")
    return sum(int(found.get(u, 0)) // MIB for u in uuids)


def test_a_pod_kube_scheduler_served_through_the_mapping_is_counted_once_by_its_claim(
    ignored: str,
    kube: Kube,
    control_plane: ControlPlane,
    nodesim: Callable[..., NodeSim],
    dra: SimulatedDraDriver,
) -> None:
    """A node pool moving back from DRA: HAMi's device plugin is away (nvidia.com/gpu at 0
    allocatable, its registration annotation left), its cards published by a DRA driver whose
    class maps nvidia.com/gpu, and the cluster's default scheduler serves a pod's
    nvidia.com/gpu through a claim of its own (KEP-5004). Then the device plugin comes back:
    the pod is bound without an allocation of ours, and would count as an outside pod's whole
    card beside its claim's; the kubelet gave it the claim's card, which is counted, once."""
    away = replace(t4_node("ext-once", ["GPU-ext-once-0", "GPU-ext-once-1"]), withdrawn=True)
    uuids = [c.uuid for c in away.cards]
    sim = nodesim(away)
    dra.publish(away)
    kube.apply(json.dumps(device_class(extended_resource=GPU)))
    limits = {"limits": {GPU: "1"}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "mapped"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": away.name},
            "containers": [{"name": "cuda", "image": "busybox", "resources": limits}],
        },
    }
    try:
        with control_plane.default_scheduler():
            kube("create", "-n", ignored, "-f", "-", stdin=json.dumps(pod))
            wait_bound(kube, ignored, "mapped", away.name)
        status = kube.pod(ignored, "mapped")["status"].get("extendedResourceClaimStatus") or {}
        claim = status.get("resourceClaimName")
        assert claim, kube.pod(ignored, "mapped")["status"]
        devices = allocated_device(kube, ignored, claim)
        assert isinstance(devices, list) and len(devices) == 1, devices
        # The device plugin back: the node re-registered, nvidia.com/gpu allocatable again.
        sim.stop()
        nodesim(replace(away, withdrawn=False))
        wait_for(
            lambda: memory_allocated(control_plane, uuids) > 0,
            timeout=60,
            what="/metrics to count the pod's card",
        )
        wait_for(
            lambda: uuids[0] in card_series(control_plane, "hami_gpu_overcommitted"),
            timeout=60,
            what="the cards to be counted in both worlds",
        )
        assert memory_allocated(control_plane, uuids) == T4_MIB
    finally:
        kube("delete", "pod", "mapped", "-n", ignored, "--wait=false")
        kube.apply(json.dumps(device_class()))
