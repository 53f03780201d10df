"""`hami bench`: the engine's decision time on large synthetic clusters.

Two kinds of cluster of N nodes x C cards (T4-like: 15360 MiB, split 10):
pods placed on random cards, and one that binpack has filled: 90 % of the
nodes full (no card takes one more pod of any shape binpack was given) and
the rest partly used. Every pod reaches the same cache the extender uses
with a request that matches its allocation, since the cache counts nothing
else. Each timed decision is `schedule()` against every node name, as a
nodeCacheCapable filter call makes it, for a pod whose shape differs from the
ones just before it (its memory moves by one MiB, or one percent, per run),
so no node's remembered fit helps unless the row says so. Rows of pods that fit nowhere
run at least 500 decisions, enough for a real p99.
"""

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hami.cache.store import ClusterCache
from hami.engine.codec import encode_node_devices
from hami.engine.decide import schedule
from hami.engine.model import (
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    NodeState,
    PodRequest,
    Usage,
)
from hami.engine.policy import pod_options
from hami.service.annotations import allocation_annotations

SPLIT, DEVMEM, DEVCORE = 10, 15360, 100
# (MiB, cores) of the pods binpack filled the cluster with; (1000, 0) is the smallest.
FILL_SHAPES = ((1000, 0), (2000, 0), (4000, 0), (6000, 0), (1000, 20), (2000, 50), (3000, 100))
SHAPES = 256  # distinct shapes a row cycles through: far more than a node remembers
NOWHERE_RUNS = 500


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
                    "annotations": {"hami.io/node-nvidia-register": encode_node_devices(devs)},
                },
                "status": {"allocatable": {"nvidia.com/gpu": str(cards * SPLIT)}},
            }
        )
    cache.replace_nodes(node_objs)
    return infos


def _pod(uid: int, node: str, card: str, mem: int, cores: int) -> dict[str, Any]:
    """A running one-card pod whose request and allocation agree, as a bind of ours leaves it."""
    limits = {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpumem": str(mem),
        "nvidia.com/gpucores": str(cores),
    }
    return {
        "metadata": {
            "uid": f"uid-{uid}",
            "namespace": "bench",
            "name": f"pod-{uid}",
            "annotations": allocation_annotations(node, ((ContainerDevice(card, mem, cores),),), 0),
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": {"phase": "Running"},
    }


def build_cluster(nodes: int, cards: int, pods: int, seed: int) -> ClusterCache:
    """`pods` pods of 1000 MiB, each on a card drawn at random."""
    rng = random.Random(seed)
    cache = ClusterCache(clock=time.monotonic)
    infos = _register(cache, nodes, cards)
    names = list(infos)
    pod_objs = []
    for p in range(pods):
        node = rng.choice(names)
        pod_objs.append(_pod(p, node, rng.choice(infos[node]).id, 1000, 0))
    cache.replace_pods(pod_objs)
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
    cache = ClusterCache(clock=time.monotonic)
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
                pod_objs.append(_pod(len(pod_objs), node, dev.id, mem, cores))
                budget -= 0 if filling else 1
    cache.replace_pods(pod_objs)
    return cache


def _full(node: NodeState) -> bool:
    return not any(_takes(c.usage, *s) for c in node.cards for s in FILL_SHAPES)


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    gpu_policy: str
    nums: int
    memreq: int = 0  # MiB, moved by the run's shape offset
    pct: int = 0  # memory percentage instead of MiB, moved likewise
    cores: int = 0
    node_policy: str = "binpack"
    nowhere: bool = False
    same_shape: bool = False  # every run asks for the same shape: a retried pending pod

    def request(self, i: int) -> PodRequest:
        shift = 0 if self.same_shape else i % SHAPES
        if self.pct:
            c = ContainerRequest(self.nums, 0, self.pct + shift % (100 - self.pct), self.cores)
        else:
            c = ContainerRequest(self.nums, self.memreq + shift, coresreq=self.cores)
        return PodRequest(app=(c,))


RANDOM_ROWS = (
    Row("spread, 1 card, 1000+ MiB", "spread", 1, 1000),
    Row("binpack, 1 card, 1000+ MiB", "binpack", 1, 1000),
    Row("mutex,binpack, 1 card, 1000+ MiB", "mutex,binpack", 1, 1000),
    Row("binpack, 1 card, 16000+ MiB", "binpack", 1, 16000, nowhere=True),
    Row(
        "binpack, 1 card, 16000 MiB, same shape", "binpack", 1, 16000, nowhere=True, same_shape=True
    ),
)
FILLED_ROWS = (
    Row("binpack, 1 card, 1000+ MiB", "binpack", 1, 1000),
    Row("spread, 1 card, 1000+ MiB", "spread", 1, 1000),
    Row("binpack, 2 cards, 4000+ MiB, 30 cores", "binpack", 2, 4000, cores=30),
    Row("binpack, 1 card, 50+ % memory", "binpack", 1, pct=50),
    Row("binpack, 1 card, 1000+ MiB, 100 cores", "binpack", 1, 1000, cores=100),
    Row("mutex,binpack, 1 card, 1000+ MiB", "mutex,binpack", 1, 1000),
    Row("binpack, 1 card, 1000+ MiB, node spread", "binpack", 1, 1000, node_policy="spread"),
    Row("binpack, 1 card, 16000+ MiB", "binpack", 1, 16000, nowhere=True),
    Row("spread, 8 cards, 15000+ MiB", "spread", 8, 15000, nowhere=True),
    Row("binpack, 8 cards, 1000+ MiB, 100 cores", "binpack", 8, 1000, cores=100, nowhere=True),
    Row(
        "binpack, 1 card, 16000 MiB, same shape", "binpack", 1, 16000, nowhere=True, same_shape=True
    ),
)


def _time(cache: ClusterCache, row: Row, runs: int) -> tuple[list[float], list[float], int]:
    """Wall and CPU time of each decision, and how many decisions placed the pod.

    CPU time as well: on a shared machine the wall clock also counts the time
    other processes held the core.
    """
    options = pod_options(
        {
            "hami.io/gpu-scheduler-policy": row.gpu_policy,
            "hami.io/node-scheduler-policy": row.node_policy,
        }
    )
    names = list(cache.view)
    wall, cpu = [], []
    placed = 0
    for i in range(runs):
        request = row.request(i)
        t0, c0 = time.perf_counter(), time.thread_time()
        d = schedule(cache.view, request, options, names)
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - t0)
        placed += d.node is not None
    return wall, cpu, placed


def _pct(samples: list[float], q: float) -> float:
    return sorted(samples)[min(len(samples) - 1, int(q * len(samples)))] * 1000


def _rows(cache: ClusterCache, rows: tuple[Row, ...], runs: int) -> list[str]:
    lines = []
    for row in rows:
        n = max(runs, NOWHERE_RUNS) if row.nowhere else runs
        wall, cpu, placed = _time(cache, row, n)
        # A row that says it fits (or not) and does otherwise measures something else.
        verdict = "fits nowhere" if not placed else f"placed {placed}/{n}"
        lines.append(
            f"  {row.label:<42} {verdict:<15} n={n:<5} p50={_pct(wall, 0.5):.3f} "
            f"p99={_pct(wall, 0.99):.3f} max={max(wall) * 1000:.3f}"
            f"  cpu p50={_pct(cpu, 0.5):.3f} p99={_pct(cpu, 0.99):.3f}"
        )
    return lines


def _timed(build: Callable[..., ClusterCache], *args: int) -> tuple[ClusterCache, float]:
    t0 = time.perf_counter()
    cache = build(*args)
    return cache, time.perf_counter() - t0


def run_engine_bench(nodes: int, cards: int, pods: int, runs: int, seed: int = 7) -> str:
    lines = [
        f"engine decision, {nodes} nodes x {cards} cards, ms; a new pod shape every run unless"
        f" 'same shape'; {runs} runs a row, fits-nowhere rows at least {NOWHERE_RUNS}:"
    ]
    for count in sorted({0, pods // 2, pods}):
        cache, built = _timed(build_cluster, nodes, cards, count, seed)
        lines.append(f" random cards, {count} pods of 1000 MiB (cache built in {built:.2f}s):")
        lines += _rows(cache, RANDOM_ROWS, runs)
    cache, built = _timed(build_filled_cluster, nodes, cards, seed)
    full = sum(_full(n) for n in cache.view.values())
    lines.append(
        f" filled by binpack: {full} of {len(cache.view)} nodes full, the rest partly used,"
        f" {len(list(cache.pods()))} pods (cache built in {built:.2f}s):"
    )
    lines += _rows(cache, FILLED_ROWS, runs)
    return "\n".join(lines)
