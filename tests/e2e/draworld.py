"""The DRA-mode world the e2e tests share: HAMi-DRA's DeviceClasses installed and the process
restarted in DRA mode (`dra_mode`), simulated nodes whose cards are also published in a HAMi-DRA
ResourceSlice under the same UUIDs (`dra_node`; the slice is written by the test, no driver
runs), and readers of what kube-scheduler allocated."""

from __future__ import annotations

from typing import Any

from hami.engine.dra.config import DEFAULT_CLASSES

from .kube import Kube, wait_for


def device_class(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{name}"'}}]},
    }


def hami_dra_slice(node: str, uuids: list[str]) -> dict[str, Any]:
    """What HAMi-DRA's driver publishes for a node's T4 cards (written by the test: no driver
    runs): each card shared by several claims, memory and cores consumable."""
    driver = DEFAULT_CLASSES[0].driver
    devices = [
        {
            "name": f"gpu-{i}",
            "allowMultipleAllocations": True,
            "attributes": {
                "uuid": {"string": uuid},
                "productName": {"string": "Tesla T4"},
                "type": {"string": "hami-gpu"},
            },
            "capacity": {"memory": {"value": "15360Mi"}, "cores": {"value": "100"}},
        }
        for i, uuid in enumerate(uuids)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-hami-dra"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def allocated_device(kube: Kube, namespace: str, claim: str) -> object:
    obj = kube.get("resourceclaim", claim, namespace)
    results = ((obj.get("status") or {}).get("allocation") or {}).get("devices", {})
    return [(r["device"], r.get("consumedCapacity")) for r in results.get("results") or ()]


def wait_bound(kube: Kube, namespace: str, name: str, node: str) -> None:
    def bound() -> bool:
        return bool(kube.pod(namespace, name)["spec"].get("nodeName") == node)

    wait_for(bound, timeout=60, what=f"{name} to be bound to {node}")


def whole(memory: str) -> list[tuple[str, dict[str, str]]]:
    """An allocation of gpu-<i> consuming `memory` and no cores (HAMi's 0 cores asked)."""
    device, mib = memory.split(":")
    return [(device, {"memory": f"{mib}Mi", "cores": "0"})]


def dra_pod(name: str, memory: str, policy: str) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": memory}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"hami.io/gpu-scheduler-policy": policy}},
        "spec": {
            "containers": [{"name": "cuda", "image": "busybox", "resources": {"limits": limits}}]
        },
    }
