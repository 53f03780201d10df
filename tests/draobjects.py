"""resource.k8s.io/v1 objects as a DRA driver and kube-scheduler write them, for the unit tests
and the simulated DRA driver (tests/e2e/dradriver.py).

The slice is what HAMi-DRA's driver publishes for a node (its DeviceClass and driver name
`hami-core-gpu.project-hami.io`, attribute `type: hami-gpu`, NVIDIA's kubelet plugin's `uuid`,
`productName`; `index` as NVIDIA's driver writes it, where HAMi-DRA's writes `minor` and names
the device `hami-gpu-<minor>`), with `memory` (bytes) and `cores` (percent of SMs) as consumable
capacity on devices that allow multiple allocations. The values of a card (its UUID, model,
memory) are the test's own, as the node simulator's are: no real GPU stands behind them.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from hami.engine.dra.slices import HAMI_DRA_DRIVER

Obj = dict[str, Any]
MIB = 2**20
API = "resource.k8s.io/v1"


def gpu_device(
    name: str,
    uuid: str,
    *,
    memory_mib: int,
    product: str = "Tesla T4",
    index: int = 0,
    kind: str = "hami-gpu",
) -> Obj:
    """One shareable GPU of a HAMi-DRA slice (`kind`: its `type` attribute, none when "")."""
    kinds = {"type": {"string": kind}} if kind else {}
    return {
        "name": name,
        "attributes": {
            **kinds,
            "uuid": {"string": uuid},
            "productName": {"string": product},
            "index": {"int": index},
        },
        "capacity": {
            "memory": {"value": str(memory_mib * MIB)},
            "cores": {"value": "100"},
        },
        "allowMultipleAllocations": True,
    }


def dcu_device(
    pci: str, uuid: str, *, memory_mib: int, units: int = 120, product: str = "K100_AI"
) -> Obj:
    """One DCU as Hygon's DRA driver publishes it (HYGON-AI/k8s-hcu-dra-driver at 643ba6d,
    internal/driver/allocatable_device.go): named `hcu-<pci address>` (`:` and `.` as `-`), no
    number; `type: hcu`, `uuid`, `productName`, `brand`, `architecture`; consumable `memory`
    (bytes), `cores` (the card's compute units: 120 on a K100_AI) and `slices` (4, each claim
    consuming 1). Its UUID, model and memory are the test's own."""

    def policy(value: str, default: str, least: str, step: str) -> Obj:
        valid = {"min": least, "max": value, "step": step}
        return {"value": value, "requestPolicy": {"default": default, "validRange": valid}}

    memory = str(memory_mib * MIB)
    return {
        "name": "hcu-" + pci.replace(":", "-").replace(".", "-"),
        "attributes": {
            "type": {"string": "hcu"},
            "uuid": {"string": uuid},
            "productName": {"string": product},
            "brand": {"string": ""},
            "architecture": {"string": ""},
        },
        "capacity": {
            "cores": policy(str(units), str(units), "0", "1"),
            "memory": policy(memory, memory, "0", str(MIB)),
            "slices": policy("4", "1", "1", "1"),
        },
        "allowMultipleAllocations": True,
    }


def resource_slice(
    node: str,
    devices: Sequence[Obj],
    *,
    driver: str = HAMI_DRA_DRIVER,
    generation: int = 1,
    uid: str = "",
    name: str = "",
) -> Obj:
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-gpus", "uid": uid or f"slice-{node}-{generation}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


def device_class(name: str = HAMI_DRA_DRIVER, extended_resource: str = "") -> Obj:
    spec: Obj = {
        "selectors": [
            {
                "cel": {
                    "expression": f'device.driver == "{name}" && '
                    f'device.attributes["{name}"].type == "hami-gpu"'
                }
            }
        ]
    }
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def claim_request(
    memory_mib: int | None = None,
    cores: int | None = None,
    device_class_name: str = HAMI_DRA_DRIVER,
) -> Obj:
    """A claim's spec asking one device of the class, with HAMi-DRA's capacity requests."""
    capacity = {}
    if memory_mib is not None:
        capacity["memory"] = str(memory_mib * MIB)
    if cores is not None:
        capacity["cores"] = str(cores)
    exactly: Obj = {
        "deviceClassName": device_class_name,
        "allocationMode": "ExactCount",
        "count": 1,
    }
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


def allocated_claim(
    name: str,
    namespace: str,
    node: str,
    results: Sequence[tuple[str, Mapping[str, str]]],
    *,
    uid: str = "",
    driver: str = HAMI_DRA_DRIVER,
) -> Obj:
    """A claim as kube-scheduler leaves it once allocated: (device name, consumedCapacity)
    per result, on the node's pool."""
    return {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"claim-{name}"},
        "spec": claim_request(),
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": driver,
                            "pool": node,
                            "device": device,
                            **({"consumedCapacity": dict(consumed)} if consumed else {}),
                            **({"shareID": f"share-{i}"} if consumed else {}),
                        }
                        for i, (device, consumed) in enumerate(results)
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [],
        },
    }


def mib(n: int) -> str:
    return str(n * MIB)
