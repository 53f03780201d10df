"""Synthetic clusters for the benchmarks: N nodes x C cards (T4-like: 15360 MiB, split 10).

Two kinds: pods placed on random cards, and one that binpack has filled: 90 % of the nodes full
(no card takes one more pod of any shape binpack was given) and the rest partly used. Every pod
reaches the same cache the extender uses with a request that matches its allocation, since the
cache counts nothing else. The first kind has a DRA variant: every node's cards also published
in a HAMi-DRA ResourceSlice under the same UUIDs, and what would be pods are allocated
ResourceClaims on those cards, counted by the cache's DRA bookkeeper.
"""

import random
import time
from typing import Any

from hami.cache.store import ClusterCache
from hami.engine import nvidianames as nv
from hami.engine.codec import encode_node_devices
from hami.engine.dra.slices import HAMI_DRA_DRIVER
from hami.engine.families.registry import Families
from hami.engine.model import ContainerDevice, DeviceInfo, NodeState, Usage
from hami.runtime.choices import serve_defaults
from hami.runtime.config import Settings
from hami.service.annotations import allocation_annotations

SPLIT, DEVMEM, DEVCORE = 10, 15360, 100
# (MiB, cores) of the pods binpack filled the cluster with; (1000, 0) is the smallest.
FILL_SHAPES = ((1000, 0), (2000, 0), (4000, 0), (6000, 0), (1000, 20), (2000, 50), (3000, 100))


def _register(cache: ClusterCache, nodes: int, cards: int) -> dict[str, tuple[DeviceInfo, ...]]:
    infos = {}
    node_objs = []
    for n in range(nodes):
        name = f"gpu-node-{n:05d}"
        devs = tuple(
            DeviceInfo(f"GPU-{n:05d}-{c:02d}", c, SPLIT, DEVMEM, DEVCORE, "NVIDIA-Tesla T4")
            for c in range(cards)
        )
        infos[name] = devs
        node_objs.append(
            {
                "metadata": {
                    "name": name,
                    "annotations": {nv.NODE_REGISTER: encode_node_devices(devs)},
                },
                "status": {"allocatable": {nv.GPU: str(cards * SPLIT)}},
            }
        )
    cache.replace_nodes(node_objs)
    return infos


def _empty() -> ClusterCache:
    """The cache `hami serve` builds without flags (hami.runtime.choices)."""
    choices = serve_defaults()
    return choices.cache(
        time.monotonic, locks=choices.locks(), reservation_ttl=Settings().reservation_ttl_seconds
    )


def _pod(
    families: Families, uid: int, node: str, card: str, mem: int, cores: int
) -> dict[str, Any]:
    """A running one-card pod whose request and allocation agree, as a bind of ours leaves it."""
    limits = {
        nv.GPU: "1",
        nv.GPUMEM: str(mem),
        nv.GPUCORES: str(cores),
    }
    return {
        "metadata": {
            "uid": f"uid-{uid}",
            "namespace": "bench",
            "name": f"pod-{uid}",
            "annotations": allocation_annotations(
                node, ((ContainerDevice(card, mem, cores),),), 0, families=families
            ),
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": {"phase": "Running"},
    }


def _slice(node: str, devs: tuple[DeviceInfo, ...]) -> dict[str, Any]:
    """The node's cards as HAMi-DRA's driver publishes them: memory and cores consumable."""
    devices = [
        {
            "name": f"gpu-{d.index}",
            "attributes": {
                "type": {"string": "hami-gpu"},
                "uuid": {"string": d.id},
                "productName": {"string": "Tesla T4"},
                "index": {"int": d.index},
            },
            "capacity": {"memory": {"value": f"{d.devmem}Mi"}, "cores": {"value": "100"}},
            "allowMultipleAllocations": True,
        }
        for d in devs
    ]
    return {
        "metadata": {"name": f"{node}-gpus", "uid": f"slice-{node}"},
        "spec": {
            "driver": HAMI_DRA_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _claim(uid: int, node: str, index: int, mem: int) -> dict[str, Any]:
    """A claim as kube-scheduler leaves it once allocated: `mem` MiB and no cores of a card."""
    result = {
        "request": "gpu",
        "driver": HAMI_DRA_DRIVER,
        "pool": node,
        "device": f"gpu-{index}",
        "shareID": f"share-{uid}",
        "consumedCapacity": {"memory": f"{mem}Mi", "cores": "0"},
    }
    return {
        "metadata": {"uid": f"claim-{uid}", "namespace": "bench", "name": f"claim-{uid}"},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def build_cluster(nodes: int, cards: int, pods: int, seed: int, dra: bool = False) -> ClusterCache:
    """`pods` pods of 1000 MiB, each on a card drawn at random; with `dra`, the cards published
    as ResourceSlices too and allocated claims of 1000 MiB in the pods' place."""
    rng = random.Random(seed)
    cache = _empty()
    infos = _register(cache, nodes, cards)
    names = list(infos)
    pod_objs, claims = [], []
    for p in range(pods):
        node = rng.choice(names)
        card = rng.choice(infos[node])
        if dra:
            claims.append(_claim(p, node, card.index, 1000))
        else:
            pod_objs.append(_pod(cache.families, p, node, card.id, 1000, 0))
    if dra:
        cache.dra.replace_slices([_slice(node, devs) for node, devs in infos.items()])
        cache.dra.replace_claims(claims)
    cache.replace_pods(pod_objs)
    cache.settle()  # as hami serve does once synced
    return cache


def _takes(u: Usage, mem: int, cores: int) -> bool:
    """Whether a card with usage `u` takes a pod of this shape (HAMi's card checks)."""
    if u.used >= SPLIT or DEVMEM - u.usedmem < mem or DEVCORE - u.usedcores < cores:
        return False
    if cores == DEVCORE and u.used > 0:
        return False
    return not (cores == 0 and u.usedcores == DEVCORE)


def build_filled_cluster(nodes: int, cards: int, seed: int, full: float = 0.9) -> ClusterCache:
    """What binpack leaves: it fills the busiest node and card first, so nodes fill one by one.

    The first `full` of the nodes get pods of random shapes on every card until
    no shape fits there any more; the others get up to three pods per card.
    """
    rng = random.Random(seed)
    cache = _empty()
    infos = _register(cache, nodes, cards)
    pod_objs: list[dict[str, Any]] = []
    for n, (node, devs) in enumerate(infos.items()):
        filling = n < nodes * full
        for dev in devs:
            u = Usage()
            budget = SPLIT if filling else rng.randint(0, 3)
            while budget > 0:
                fitting = [s for s in FILL_SHAPES if _takes(u, *s)]
                if not fitting:
                    break
                mem, cores = rng.choice(fitting)
                u += Usage(1, mem, cores)
                pod_objs.append(_pod(cache.families, len(pod_objs), node, dev.id, mem, cores))
                budget -= 0 if filling else 1
    cache.replace_pods(pod_objs)
    cache.settle()  # as hami serve does once synced
    return cache


def is_full(node: NodeState) -> bool:
    """No card of the node takes one more pod of any shape binpack filled the cluster with."""
    return not any(_takes(c.usage, *s) for c in node.cards for s in FILL_SHAPES)
