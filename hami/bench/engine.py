"""`hami bench`: the engine's decision time on the large synthetic clusters of hami.bench.cluster.

Each timed decision is `schedule()` against every node name, as a nodeCacheCapable filter call
makes it, for a pod whose shape differs from the ones just before it (its memory moves by one
MiB, or one percent, per run), so no node's remembered fit helps unless the row says so. Rows of
pods that fit nowhere run at least 500 decisions, enough for a real p99.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass

from hami.bench.cluster import build_cluster, build_filled_cluster, is_full
from hami.cache.store import ClusterCache
from hami.engine.decide import schedule
from hami.engine.model import ContainerRequest, PodRequest
from hami.engine.policy import pod_options

SHAPES = 256  # distinct shapes a row cycles through: far more than a node remembers
NOWHERE_RUNS = 500


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
        d = schedule(cache.view, request, options, names, families=cache.families)
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
    full = sum(is_full(n) for n in cache.view.values())
    lines.append(
        f" filled by binpack: {full} of {len(cache.view)} nodes full, the rest partly used,"
        f" {len(list(cache.pods()))} pods (cache built in {built:.2f}s):"
    )
    lines += _rows(cache, FILLED_ROWS, runs)
    return "\n".join(lines)
