"""The DRA-mode world the e2e tests share: HAMi-DRA's DeviceClasses installed and the process
restarted in DRA mode (`dra_mode`), simulated nodes whose cards are also published in a HAMi-DRA
ResourceSlice under the same UUIDs (`dra_node`; the slice is written by the test, no driver
runs), the one-card GPU pod the DRA tests create in either world (`gpu_pod`), and readers of
what kube-scheduler allocated."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client.parser import text_string_to_metric_families

from hami.engine.dra.config import DEFAULT_CLASSES
from tests.draobjects import gpu_device, resource_slice

from .kube import Kube, wait_for
from .nodespec import T4_MEMORY_MIB
from .prometheus import get

if TYPE_CHECKING:
    from .cluster import ControlPlane

# The pod annotation that sends a pod to one world (`dra` under --dra-mode=annotated).
WORLD = "hami.io/device-world"


def device_class(name: str, selector: str = "") -> dict[str, Any]:
    """A DeviceClass selecting `selector`; by default, every device of the driver `name`."""
    selector = selector or f'device.driver == "{name}"'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": selector}}]},
    }


def hami_dra_slice(node: str, uuids: list[str]) -> dict[str, Any]:
    """What HAMi-DRA's driver publishes for a node's T4 cards (written by the test: no driver
    runs): each card shared by several claims, memory and cores consumable."""
    devices = [
        gpu_device(f"gpu-{i}", uuid, memory_mib=T4_MEMORY_MIB, index=i)
        for i, uuid in enumerate(uuids)
    ]
    obj = resource_slice(node, devices, driver=DEFAULT_CLASSES[0].driver, name=f"{node}-hami-dra")
    del obj["metadata"]["uid"]  # the API server's to give
    return obj


def allocated_device(kube: Kube, namespace: str, claim: str) -> object:
    obj = kube.get("resourceclaim", claim, namespace)
    results = ((obj.get("status") or {}).get("allocation") or {}).get("devices", {})
    return [(r["device"], r.get("consumedCapacity")) for r in results.get("results") or ()]


def claim_devices(kube: Kube, namespace: str, claim: str) -> list[str]:
    """The devices kube-scheduler allocated the claim ([] while it is not allocated)."""
    status = kube.get("resourceclaim", claim, namespace).get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    return [r["device"] for r in results]


def wait_allocated(kube: Kube, namespace: str, claim: str) -> list[str]:
    """The devices of the claim, once kube-scheduler allocated it."""
    return list(
        wait_for(
            lambda: claim_devices(kube, namespace, claim),
            timeout=60,
            what=f"kube-scheduler to allocate claim {claim}",
        )
    )


def card_series(control_plane: ControlPlane, name: str) -> dict[str, float]:
    """device_uuid -> the value of the series `name` on /metrics now."""
    body = get(control_plane.metrics_url).decode()
    return {
        s.labels.get("device_uuid", ""): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if s.name == name
    }


def pod_on(node: str, name: str, resources: dict[str, Any], claim: str = "") -> dict[str, Any]:
    """A pod of our scheduler pinned to `node`, one container with `resources`; with `claim`,
    using that ResourceClaim (made beforehand) as `resources.claims` entry "gpu"."""
    spec: dict[str, Any] = {
        "schedulerName": "hami-scheduler",
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [{"name": "app", "image": "busybox", "resources": resources}],
    }
    if claim:
        spec["containers"][0]["resources"] = {**resources, "claims": [{"name": "gpu"}]}
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def resource_claim(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


def wait_placed(kube: Kube, namespace: str, name: str) -> str:
    """The pod's hami.io/vgpu-devices-allocated, once the extender placed it."""
    written = wait_for(
        lambda: kube.pod_annotation(namespace, name, "hami.io/vgpu-devices-allocated"),
        timeout=60,
        what=f"{name} to be placed",
    )
    return str(written)


def wait_bound(kube: Kube, namespace: str, name: str, node: str) -> None:
    def bound() -> bool:
        return bool(kube.pod(namespace, name)["spec"].get("nodeName") == node)

    wait_for(bound, timeout=60, what=f"{name} to be bound to {node}")


def whole(memory: str) -> list[tuple[str, dict[str, str]]]:
    """An allocation of gpu-<i> consuming `memory` and no cores (HAMi's 0 cores asked)."""
    device, mib = memory.split(":")
    return [(device, {"memory": f"{mib}Mi", "cores": "0"})]


def gpu_pod(
    name: str,
    memory: str,
    *,
    policy: str = "",
    world: str = "",
    node: str = "",
    scheduler: str = "",
) -> dict[str, Any]:
    """A pod whose container `cuda` asks one card with `memory` MiB; where given, its GPU
    policy, its device world (WORLD), a node selector on `node` and its schedulerName."""
    annotations = {}
    if policy:
        annotations["hami.io/gpu-scheduler-policy"] = policy
    if world:
        annotations[WORLD] = world
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": memory}
    spec: dict[str, Any] = {
        "containers": [{"name": "cuda", "image": "busybox", "resources": {"limits": limits}}]
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": spec,
    }
