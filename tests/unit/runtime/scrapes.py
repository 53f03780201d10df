"""Clusters whose metrics the exposition tests scrape: one pod's, the issue's A100 in MIG mode,
pods of another scheduler."""

from dataclasses import replace

from hami.cache.store import ClusterCache
from hami.engine import nvidianames as names
from hami.engine.codec import encode_node_devices
from hami.engine.migalloc import decode_allocations, encode_allocations
from hami.engine.model import ContainerDevice, DeviceInfo
from hami.engine.requests import ResourceDefaults
from hami.runtime.metrics import Metrics
from hami.service.annotations import allocation_annotations
from tests.builders import FAMILIES
from tests.unit import mig_cluster as mc


def metrics_of_one_pod(legacy: bool = False, per_pod: bool = True) -> Metrics:
    """One T4 node, one pod holding 1000 MiB and 30 cores of it, one quota."""
    cache = ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    devs = (DeviceInfo("GPU-a", 0, 10, 15360, 100, "NVIDIA-Tesla T4"),)
    cache.replace_nodes([
        {"metadata": {"name": "n", "annotations": {"hami.io/node-nvidia-register": encode_node_devices(devs)}},
         "status": {"allocatable": {"nvidia.com/gpu": "10"}}},
    ])  # fmt: skip
    cache.upsert_pod({
        "metadata": {"uid": "u", "namespace": "ns", "name": "p",
                     "annotations": allocation_annotations(
                         "n", ((ContainerDevice("GPU-a", 1000, 30),),), 0, families=FAMILIES)},
        "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {"limits": {
            "nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 30}}}]},
        "status": {"phase": "Running"},
    })  # fmt: skip
    cache.quotas.replace([{"metadata": {"uid": "q", "namespace": "ns", "name": "gpu"},
                           "spec": {"hard": {"limits.nvidia.com/gpumem": "8000"}}}])  # fmt: skip
    return Metrics(cache, lambda: 0.0, lambda: 0, legacy, per_pod)


def mig_cluster() -> ClusterCache:
    """The issue's A100 with two instances the device plugin has created and one it has not."""
    c = mc.Cluster()
    for name, mem in (("a", 15000), ("b", 4000), ("c", 4000)):
        obj = mc.pod(name, mc.gpu(mem))
        written, _ = c.place(obj)
        if name != "c":
            (entry,) = decode_allocations(written[names.MIG_ALLOCATIONS])
            made = replace(entry.instance, uuid=f"MIG-{name}", gpu_instance=2, compute_instance=0)
            obj["metadata"]["annotations"][names.MIG_ALLOCATIONS] = encode_allocations(
                (replace(entry, instance=made),)
            )
            c.cache.upsert_pod(obj)
    return c.cache


def outside_pod(name: str, node: str, gpus: int) -> dict[str, object]:
    return {
        "metadata": {"uid": name, "namespace": "ns", "name": name},
        "spec": {
            "nodeName": node,
            "schedulerName": "other",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
        },
        "status": {"phase": "Running"},
    }
