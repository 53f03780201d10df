"""`python -m tests.bench.preemption`: what a preemption plan costs the event loop.

A cache of N T4 nodes (4 cards each) with P GPU pods of priorities 0 to 2 spread over
them, every card partly used, and a pending pod that fits nowhere. Prints, per pod shape:
the scan that groups victims by node (synchronous), the dry runs (kube-scheduler's rule:
at most max(10 % of the nodes, 100) candidate nodes are dry-run), and, for the plan as
`hami serve --preemption` runs it, its wall time and the longest time it held the event
loop (probed by a task that yields continuously).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from hami.cache.store import ClusterCache
from hami.engine.codec import encode_node_devices
from hami.engine.model import ContainerDevice, ContainerRequest, DeviceInfo, PodRequest
from hami.engine.policy import pod_options
from hami.engine.preempt import Preemptor
from hami.engine.requests import ResourceDefaults
from hami.kube.client import Kube
from hami.kube.events import EventRecorder
from hami.service.annotations import allocation_annotations
from hami.service.preemption.facts import PodFacts
from hami.service.preemption.plan import at_once, field
from hami.service.preemption.preempter import Preempter
from tests.builders import FAMILIES


def cluster(nodes: int, per_node: int) -> tuple[ClusterCache, PodFacts]:
    node_objs: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for n in range(nodes):
        devs = tuple(
            DeviceInfo(f"GPU-{n}-{i}", i, 10, 15360, 100, "NVIDIA-Tesla T4") for i in range(4)
        )
        annotations = {"hami.io/node-nvidia-register": encode_node_devices(devs)}
        node_objs.append(
            {
                "metadata": {"name": f"n{n}", "annotations": annotations},
                "status": {"allocatable": {"nvidia.com/gpu": "40"}},
            }
        )
        for k in range(per_node):
            uid = f"p{n}-{k}"
            devices = ((ContainerDevice(f"GPU-{n}-{k % 4}", 3000, 0),),)
            limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}
            pods.append(
                {
                    "metadata": {
                        "uid": uid,
                        "namespace": "ns",
                        "name": uid,
                        "annotations": allocation_annotations(
                            f"n{n}", devices, 0, families=FAMILIES
                        ),
                    },
                    "spec": {
                        "nodeName": f"n{n}",
                        "priority": k % 3,
                        "containers": [{"name": "c", "resources": {"limits": limits}}],
                    },
                    "status": {"phase": "Running", "startTime": f"2026-01-01T00:00:{k:02d}Z"},
                }
            )
    cache = ClusterCache(time.monotonic, families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes(node_objs)
    cache.replace_pods(pods)
    facts = PodFacts()
    facts.replace(pods)
    return cache, facts


async def loop_hold(preempter: Preempter, pod: Preemptor, names: list[str]) -> tuple[float, float]:
    loop = asyncio.get_running_loop()
    worst = 0.0
    done = False

    async def probe() -> None:
        nonlocal worst
        while not done:
            start = loop.time()
            await asyncio.sleep(0)
            worst = max(worst, loop.time() - start)

    task = asyncio.create_task(probe())
    await asyncio.sleep(0)
    start = time.perf_counter()
    await preempter._plan(pod, "pending", names, ())
    wall = time.perf_counter() - start
    done = True
    await task
    return wall, worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods-per-node", type=int, default=10)
    args = parser.parse_args()
    cache, facts = cluster(args.nodes, args.pods_per_node)
    names = sorted(cache.view)
    # Only _plan runs: no API call is made, the client and recorder are never used.
    preempter = Preempter(
        Kube.__new__(Kube),
        cache,
        facts,
        EventRecorder.__new__(EventRecorder),
        scheduler_name="hami-scheduler",
        hold_seconds=60,
    )
    print(f"{args.nodes} nodes x 4 T4, {args.nodes * args.pods_per_node} GPU pods (3000 MiB)")
    for mem, priority, policy in ((15000, 5, "binpack"), (6000, 2, "mutex"), (15000, 0, "spread")):
        request = PodRequest(app=(ContainerRequest(nums=1, memreq=mem),))
        pod = Preemptor(
            request,
            pod_options({"hami.io/gpu-scheduler-policy": policy}),
            priority,
            families=FAMILIES,
        )
        start = time.perf_counter()
        found = field(cache, facts, pod, "pending", names)
        scan = time.perf_counter() - start
        start = time.perf_counter()
        chosen = at_once(found.planning())
        whole = time.perf_counter() - start
        wall, worst = asyncio.run(loop_hold(preempter, pod, names))
        victims = (
            "no plan" if chosen is None else f"{len(chosen.victims)} victim(s) on {chosen.node}"
        )
        print(
            f"  {mem} MiB {policy}, priority {priority}: {victims}; scan {scan * 1000:.1f} ms, "
            f"plan {whole * 1000:.1f} ms; as served: {wall * 1000:.1f} ms, "
            f"longest loop hold {worst * 1000:.1f} ms"
        )


if __name__ == "__main__":
    main()
