"""DRA claims counted on the real control plane (issue 42, items 2 and 5): kube-scheduler's
DynamicResources plugin allocates a claim on a card the simulated DRA driver publishes under
the same UUID as HAMi's device plugin registration, and a later HAMi `nvidia.com/gpumem` pod
does not get the memory the claim consumed there; /metrics shows the claim on that card.

The three ways a GPU claim reaches a node beside HAMi's pods: a pre-made claim shared by pods
that ask for no GPU; a claim on the GPU-less sidecar of a GPU pod; a claim beside
`nvidia.com/gpu` in one container. The last two are GPU pods the webhook admits because the
claim's class is one the bookkeeping counts (hami.runtime.config.device_classes); before it,
they were refused (test_claims.py).

Stand-in values: the cards (UUIDs, 15360 MiB T4s) are the node simulator's, and the slice is
the simulated driver's (tests/e2e/dradriver.py); every allocation is kube-scheduler's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.draobjects import claim_request

from .binds import readyz
from .cluster import ControlPlane, FaultyApi, NodeSim
from .dradriver import SimulatedDraDriver
from .draworld import resource_claim
from .faults import cut_off
from .kube import Kube, KubectlError, wait_for
from .nodespec import NodeSpec, t4_node
from .prometheus import get
from .status import hami_status

pytestmark = pytest.mark.e2e

MIB = 2**20
CLAIMED = 10000  # MiB the claim consumes on the published card
PROBE = 8000  # MiB the later HAMi pod asks: fits beside the claim on no card but the other
SCHEDULER = "hami-scheduler"


def claim(name: str) -> dict[str, Any]:
    return resource_claim(name, claim_request(CLAIMED, 50))


def pod(
    name: str, node: str, containers: list[dict[str, Any]], claim_name: str = ""
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER,
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": containers,
    }
    if claim_name:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def container(name: str, *, claim: bool = False, gpumem: int = 0) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if gpumem:
        resources["limits"] = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(gpumem)}
    if claim:
        resources["claims"] = [{"name": "gpu"}]
    return {"name": name, "image": "busybox", "resources": resources}


def samples(control_plane: ControlPlane, name: str) -> dict[tuple[str, str], float]:
    """(device_uuid, source or "") -> value of one series, as /metrics shows it now."""
    body = get(control_plane.metrics_url).decode()
    return {
        (s.labels.get("device_uuid", ""), s.labels.get("source", "")): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if s.name == name
    }


# The consumers of the claim, by way, each pod given the node; the MiB HAMi places beside it.
WAYS: dict[str, tuple[Callable[[str], list[dict[str, Any]]], int]] = {
    "pre-made shared claim": (
        lambda node: [
            pod("consumer-a", node, [container("app", claim=True)], "shared"),
            pod("consumer-b", node, [container("app", claim=True)], "shared"),
        ],
        0,
    ),
    "claim on a GPU-less sidecar": (
        lambda node: [
            pod(
                "with-sidecar",
                node,
                [container("cuda", gpumem=2000), container("sidecar", claim=True)],
                "shared",
            )
        ],
        2000,
    ),
    "claim beside nvidia.com/gpu": (
        lambda node: [pod("beside", node, [container("cuda", gpumem=2000, claim=True)], "shared")],
        2000,
    ),
}


@pytest.mark.parametrize("way", list(WAYS))
def test_a_claim_kube_scheduler_allocated_is_counted_on_the_same_card(
    way: str,
    namespace: str,
    kube: Kube,
    control_plane: ControlPlane,
    nodesim: Callable[..., NodeSim],
    dra: SimulatedDraDriver,
) -> None:
    consumers, gpu_share = WAYS[way]
    ns = namespace
    node: NodeSpec = t4_node(f"dra-{ns[-6:]}", [f"GPU-dra-{ns[-6:]}-{i}" for i in range(2)])
    free, shared = (c.uuid for c in node.cards)
    nodesim(node)
    # Only the second card is published: kube-scheduler can put the claim nowhere else, and it
    # is where a HAMi pod lands when both cards look alike (the highest index wins a tie).
    dra.publish(node, cards=[1])
    kube("apply", "-n", ns, "-f", "-", stdin=json.dumps(claim("shared")))
    placed = consumers(node.name)
    try:
        for p in placed:
            kube("apply", "-n", ns, "-f", "-", stdin=json.dumps(p))

        def allocated() -> list[str]:
            status = kube.get("resourceclaim", "shared", ns).get("status") or {}
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
            return [
                r["device"] for r in results if len(status.get("reservedFor") or ()) == len(placed)
            ]

        assert wait_for(allocated, timeout=60, what="kube-scheduler to allocate the claim") == [
            "gpu-1"
        ]
        held = (CLAIMED + gpu_share) * MIB
        wait_for(
            lambda: (
                samples(control_plane, "hami_dra_gpu_memory_allocated_bytes").get((shared, ""))
                == CLAIMED * MIB
            ),
            timeout=60,
            what="/metrics to show the claim's memory on the card",
        )
        # One card, both worlds: HAMi's series count the claim beside the pods on it.
        assert samples(control_plane, "hami_gpu_source_info")[(shared, "both")] == 1
        assert samples(control_plane, "hami_gpu_source_info")[(free, "device-plugin")] == 1
        wait_for(
            lambda: (
                samples(control_plane, "hami_gpu_memory_allocated_bytes").get((shared, "")) == held
            ),
            timeout=60,
            what=f"{held / MIB:.0f} MiB on {shared} in hami_gpu_memory_allocated_bytes",
        )
        # binpack would take the fuller card if the claim's 10000 MiB were not counted there.
        probe = pod("probe", node.name, [container("cuda", gpumem=PROBE)])
        probe["metadata"]["annotations"] = {"hami.io/gpu-scheduler-policy": "binpack"}
        kube("apply", "-n", ns, "-f", "-", stdin=json.dumps(probe))
        written = wait_for(
            lambda: kube.pod_annotation(ns, "probe", "hami.io/vgpu-devices-allocated"),
            timeout=60,
            what="the probe pod to be placed",
        )
        assert written is not None and written.startswith(f"{free},NVIDIA,{PROBE},"), written
        # `hami status`, as a user runs it: the claim on the card both worlds have.
        doc = orjson.loads(hami_status(kube, "--json"))
        (cards,) = [n["cards"] for n in doc["nodes"] if n["name"] == node.name]
        by_uuid = {c["uuid"]: c for c in cards}
        assert (by_uuid[shared]["source"], by_uuid[free]["source"]) == ("both", "device-plugin")
        claims = [
            (h["namespace"], h["pod"], h["memory"]) for h in by_uuid[shared]["pods"] if h["claim"]
        ]
        assert claims == [(ns, "shared", CLAIMED)], by_uuid[shared]
        assert by_uuid[shared]["memory_mib"]["allocated"] == CLAIMED + gpu_share
    finally:
        for p in [*placed, {"metadata": {"name": "probe"}}]:
            kube(
                "delete",
                "pod",
                p["metadata"]["name"],
                "-n",
                ns,
                "--ignore-not-found",
                "--force",
                "--grace-period=0",
            )
        dra.release(ns, "shared")


CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"


def test_a_claims_watch_out_of_touch_blinds_the_cache_and_the_relist_counts_what_it_missed(
    namespace: str,
    kube: Kube,
    control_plane: ControlPlane,
    nodesim: Callable[..., NodeSim],
    dra: SimulatedDraDriver,
    faulty: FaultyApi,
    app_args: Callable[..., None],
) -> None:
    """The claims informer is held to the pods' rules: silent past its bound (1.5 watch periods
    and the reconnect pause: 11 s with 4 s watches), the cache is blind and /readyz says which
    watch; back in touch, the list counts the claim allocated meanwhile, and the next HAMi pod
    is kept off its card."""
    app_args("--kubeconfig", str(faulty.kubeconfig), "--watch-timeout-seconds", "4")
    node = t4_node("dra-blind", ["GPU-dra-blind-0", "GPU-dra-blind-1"])
    free, shared = (c.uuid for c in node.cards)
    nodesim(node)
    dra.publish(node, cards=[1])
    cut_off(faulty, f"^{CLAIMS}$", CLAIMS)
    kube("apply", "-n", namespace, "-f", "-", stdin=json.dumps(claim("shared")))
    consumer = pod("consumer", node.name, [container("app", claim=True)], "shared")
    try:
        kube("apply", "-n", namespace, "-f", "-", stdin=json.dumps(consumer))

        def blind() -> str:
            status, text = readyz(control_plane)
            return text if status == 503 else ""

        why = wait_for(
            blind,
            timeout=90,
            what="/readyz to fail while the claims watch is out of touch",
        )
        assert "the resourceclaims watch has not heard from the API server" in why, why
        faulty.set()
        wait_for(lambda: readyz(control_plane)[0] == 200, 90, what="/readyz after the relist")
        probe = pod("probe", node.name, [container("cuda", gpumem=PROBE)])
        probe["metadata"]["annotations"] = {"hami.io/gpu-scheduler-policy": "binpack"}
        kube("apply", "-n", namespace, "-f", "-", stdin=json.dumps(probe))
        written = wait_for(
            lambda: kube.pod_annotation(namespace, "probe", "hami.io/vgpu-devices-allocated"),
            timeout=60,
            what="the probe pod to be placed",
        )
        assert written is not None and written.startswith(f"{free},NVIDIA,{PROBE},"), (
            written,
            shared,
        )
    finally:
        for name in ("consumer", "probe"):
            kube("delete", "pod", name, "-n", namespace, "--ignore-not-found", "--force",
                 "--grace-period=0")  # fmt: skip
        dra.release(namespace, "shared")


def test_a_claim_counts_against_its_namespaces_gpu_memory_quota(
    namespace: str,
    kube: Kube,
    control_plane: ControlPlane,
    nodesim: Callable[..., NodeSim],
    dra: SimulatedDraDriver,
) -> None:
    """limits.nvidia.com/gpumem 12000: with the claim's 10000 MiB counted, a 4000 MiB pod is
    refused at creation as HAMi's webhook refuses one over the quota (admitted before)."""
    node = t4_node("dra-quota", ["GPU-dra-quota-0", "GPU-dra-quota-1"])
    nodesim(node)
    dra.publish(node, cards=[1])
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu"},
        "spec": {"hard": {"limits.nvidia.com/gpumem": "12000"}},
    }
    kube("apply", "-n", namespace, "-f", "-", stdin=json.dumps(quota))
    kube("apply", "-n", namespace, "-f", "-", stdin=json.dumps(claim("shared")))
    consumer = pod("consumer", node.name, [container("app", claim=True)], "shared")
    try:
        kube("apply", "-n", namespace, "-f", "-", stdin=json.dumps(consumer))
        wait_for(
            lambda: _quota_used(control_plane, namespace) == CLAIMED,
            timeout=60,
            what="the claim's memory counted against the namespace's quota",
        )
        over = pod("over", node.name, [container("cuda", gpumem=4000)])
        with pytest.raises(KubectlError, match="denied the request: exceeding resource quota"):
            kube("apply", "-n", namespace, "-f", "-", stdin=json.dumps(over))
    finally:
        kube("delete", "pod", "consumer", "-n", namespace, "--ignore-not-found", "--force",
             "--grace-period=0")  # fmt: skip
        dra.release(namespace, "shared")


def _quota_used(control_plane: ControlPlane, namespace: str) -> float:
    body = get(control_plane.metrics_url).decode()
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            if (
                s.name == "hami_resource_quota_used"
                and s.labels.get("namespace") == namespace
                and s.labels.get("quota_name") == "nvidia.com/gpumem"
            ):
                return float(s.value)
    return 0.0
