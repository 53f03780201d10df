"""`hami bench`: the engine's decision time on a large synthetic cluster.

Builds N nodes x C cards (T4-like, split 10), places P pods through the same
cache and engine the extender uses, then times `schedule()` for one more pod
against every node name, the way a nodeCacheCapable filter call does.
"""

import random
import statistics
import time

from hami.cache.store import ClusterCache
from hami.engine.codec import encode_node_devices
from hami.engine.decide import schedule
from hami.engine.model import ContainerDevice, ContainerRequest, DeviceInfo, PodRequest
from hami.engine.policy import pod_options
from hami.service.annotations import allocation_annotations


def build_cluster(nodes: int, cards: int, pods: int, seed: int) -> ClusterCache:
    rng = random.Random(seed)
    cache = ClusterCache(clock=time.monotonic)
    node_objs = []
    infos = {}
    for n in range(nodes):
        name = f"gpu-node-{n:05d}"
        devs = tuple(
            DeviceInfo(f"GPU-{n:05d}-{c:02d}", c, 10, 15360, 100, "NVIDIA-Tesla T4")
            for c in range(cards)
        )
        infos[name] = devs
        node_objs.append(
            {
                "metadata": {
                    "name": name,
                    "annotations": {"hami.io/node-nvidia-register": encode_node_devices(devs)},
                },
                "status": {"allocatable": {"nvidia.com/gpu": str(cards * 10)}},
            }
        )
    cache.replace_nodes(node_objs)
    names = list(infos)
    pod_objs = []
    for p in range(pods):
        node = rng.choice(names)
        card = rng.choice(infos[node])
        pod_objs.append(
            {
                "metadata": {
                    "uid": f"uid-{p}",
                    "namespace": "bench",
                    "name": f"pod-{p}",
                    "annotations": allocation_annotations(
                        node, ((ContainerDevice(card.id, 1000, 0),),), 0
                    ),
                },
                "spec": {"nodeName": node, "containers": [{"name": "c"}]},
                "status": {"phase": "Running"},
            }
        )
    cache.replace_pods(pod_objs)
    return cache


def _time(cache: ClusterCache, policy: str, runs: int, memreq: int, cold: bool) -> list[float]:
    """Decision times; `cold` forgets every node's remembered fits first (a pod of a new shape)."""
    request = PodRequest(app=(ContainerRequest(nums=1, memreq=memreq),))
    options = pod_options({"hami.io/gpu-scheduler-policy": policy})
    names = list(cache.view)
    out = []
    for _ in range(runs):
        if cold:
            for node in cache.view.values():
                node.memo.clear()
        t0 = time.perf_counter()
        schedule(cache.view, request, options, names)
        out.append(time.perf_counter() - t0)
    return out


def _pct(samples: list[float], q: float) -> float:
    return sorted(samples)[min(len(samples) - 1, int(q * len(samples)))] * 1000


def run_engine_bench(nodes: int, cards: int, pods: int, runs: int, seed: int = 7) -> str:
    lines = [f"engine decision, {nodes} nodes x {cards} cards, {runs} runs per row (ms):"]
    for placed in sorted({0, pods // 2, pods}):
        t0 = time.perf_counter()
        cache = build_cluster(nodes, cards, placed, seed)
        built = time.perf_counter() - t0
        rows = [
            ("spread", 1000, True),
            ("binpack", 1000, True),
            ("mutex,binpack", 1000, True),
            ("binpack", 16000, True),
            ("binpack", 16000, False),
        ]
        for policy, memreq, cold in rows:
            nowhere = memreq > 15360
            s = _time(
                cache, policy, max(runs // 10, 20) if nowhere and cold else runs, memreq, cold
            )
            label = (
                f"{policy} {memreq}MiB"
                + (" fits nowhere" if nowhere else "")
                + ("" if cold else ", same shape again")
            )
            lines.append(
                f"  placed={placed:<6} {label:<48} p50={_pct(s, 0.5):.3f} "
                f"p99={_pct(s, 0.99):.3f} max={max(s) * 1000:.3f} mean={statistics.fmean(s) * 1000:.3f}"
                f"  (cache built in {built:.2f}s)"
            )
    return "\n".join(lines)
