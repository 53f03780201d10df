"""`python -m tests.bench.draview`: what the DRA placer's view of the cards costs beside the
placement it serves.

    python -m tests.bench.draview --nodes 1000,5000

For each size, a cluster of N nodes x 8 cards (hami.bench.cluster, its DRA variant: every card
registered by the device plugin and also published in a HAMi-DRA ResourceSlice, 4 allocated
claims per node on random cards), then, each --runs times, the thread's CPU of:

* `ClusterCache.dra_view()` after one claim event (what the placer reads before each pod);
* the engine's decision over that view for a one-card pod of 1000+ MiB, spread and binpack,
  every node a candidate (`schedule`, as the placer's Placement calls it);
* the placer's whole placement (`Placement.filter` over `cache.dra_view`: view, decision and
  reservation), its reservation then dropped so every run sees the same cluster.

Figures, printed (p50 / p99 ms); nothing here is a test bound.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

from hami.bench.cluster import build_cluster
from hami.cache.store import ClusterCache
from hami.engine import nvidianames as nv
from hami.engine.decide import schedule
from hami.engine.dra.slices import HAMI_DRA_DRIVER
from hami.engine.model import ContainerRequest, PodRequest
from hami.engine.policy import Defaults, pod_options
from hami.engine.requests import ResourceDefaults
from hami.service.placement import Placement

CARDS = 8
CLAIMS_PER_NODE = 4


def _claim_event(cache: ClusterCache, i: int) -> None:
    """One claim on node 0's first card, its consumed memory changed: a change the view must see."""
    node = "gpu-node-00000"
    result = {
        "request": "gpu",
        "driver": HAMI_DRA_DRIVER,
        "pool": node,
        "device": "gpu-0",
        "shareID": f"bench-{i}",
        "consumedCapacity": {"memory": f"{10 + i % 97}Mi", "cores": "0"},
    }
    claim = {
        "metadata": {"uid": f"bench-claim-{i % 2}", "namespace": "bench", "name": "c"},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }
    cache.dra.upsert_claim(claim)


def _pod(i: int, policy: str) -> dict[str, Any]:
    limits = {nv.GPU: "1", nv.GPUMEM: str(1000 + i % 256)}
    return {
        "metadata": {
            "uid": f"bench-pod-{i}",
            "namespace": "bench",
            "name": f"p{i}",
            "annotations": {"hami.io/gpu-scheduler-policy": policy},
        },
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }


def _cpu(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.thread_time()
        fn()
        out.append((time.thread_time() - t0) * 1000)
    return sorted(out)


def _fmt(ms: Sequence[float]) -> str:
    return f"{ms[len(ms) // 2]:8.2f} / {ms[min(len(ms) - 1, int(len(ms) * 0.99))]:8.2f}"


def run(nodes: int, runs: int) -> list[str]:
    t0 = time.monotonic()
    cache = build_cluster(nodes, CARDS, nodes * CLAIMS_PER_NODE, seed=7, dra=True)
    names = sorted(cache.dra.nodes())
    lines = [
        f"{nodes} DRA nodes x {CARDS} cards, {nodes * CLAIMS_PER_NODE} claims "
        f"(built in {time.monotonic() - t0:.1f} s):"
    ]
    events = iter(range(10**9))

    def view_after_event() -> object:
        _claim_event(cache, next(events))
        return cache.dra_view()

    lines.append(f"  dra_view() after a claim event        {_fmt(_cpu(view_after_event, runs))}")
    view = cache.dra_view()
    for policy in ("spread", "binpack"):
        options = pod_options({"hami.io/gpu-scheduler-policy": policy}, Defaults())
        shapes = iter(range(10**9))

        def decide(options: Any = options, shapes: Any = shapes) -> object:
            request = PodRequest(app=(ContainerRequest(1, 1000 + next(shapes) % 256),))
            return schedule(view, request, options, names, families=cache.families)

        lines.append(f"  the decision over it, {policy:<8}        {_fmt(_cpu(decide, runs))}")
    placement = Placement(cache, Defaults(), ResourceDefaults(), states=cache.dra_view)
    for policy in ("spread", "binpack"):
        pods = iter(range(10**9))

        def place(policy: str = policy, pods: Any = pods) -> object:
            pod = _pod(next(pods), policy)
            outcome = placement.filter(pod, names)
            cache.forget(pod["metadata"]["uid"])
            return outcome

        lines.append(f"  the placer's placement, {policy:<8}      {_fmt(_cpu(place, runs))}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.draview", description=__doc__)
    p.add_argument("--nodes", default="1000,5000", help="comma-separated cluster sizes")
    p.add_argument("--runs", type=int, default=50)
    args = p.parse_args(argv)
    print("thread CPU, p50 / p99 ms")
    for size in (int(n) for n in args.nodes.split(",")):
        print("\n".join(run(size, args.runs)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
