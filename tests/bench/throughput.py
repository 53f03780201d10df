"""End-to-end scheduling throughput through a real kube-apiserver and kube-scheduler.

    python -m tests.bench.throughput --nodes 1000 --pods 2000 --node-policy spread
    python -m tests.bench.throughput --nodes 100 --pods 1000 --node-policy binpack

Starts the e2e control plane (etcd, kube-apiserver, `hami serve`, kube-scheduler, all on
127.0.0.1), registers N fake GPU nodes with the node simulator (which plays kubelet and HAMi's
device plugin, one worker per node), then creates M pods as fast as the API server takes them
and follows them on a watch until every one is bound. Two runs side by side:

* **gpu**: pods asking for one card share each (`nvidia.com/gpu: 1`, `gpumem`), through our
  webhook, /filter and /bind;
* **ceiling**: the same number of pods asking for CPU only, scheduled by the same kube-scheduler
  profile without calling the extender (it asks only for pods with GPU resources).

Prints pods bound per second, bind failures, filter calls per pod, create-to-bound p50/p99,
our process's event-loop lag p99 (from its histogram) and its RSS. Bounded: every wait has a
deadline and the run stops after `--timeout` seconds whatever happened.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config, watch
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.cluster import ControlPlane, ensure_binaries
from tests.e2e.nodespec import t4_node


@dataclass
class Run:
    label: str
    pods: int
    seconds: float
    latencies: list[float]
    bound: int
    filters: float
    bind_failures: float
    loop_lag_p99: float
    rss_mib: float
    created_in: float
    cpu: dict[str, float]

    def line(self) -> str:
        lat = sorted(self.latencies) or [float("nan")]
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        rate = self.bound / self.seconds if self.seconds else 0.0
        return (
            f"{self.label:8} {self.bound:>5}/{self.pods} bound in {self.seconds:6.1f}s  "
            f"{rate:7.1f} pods/s  create->bound p50 {statistics.median(lat):6.2f}s "
            f"p99 {p99:6.2f}s  filters/pod {self.filters:5.2f}  bind failures "
            f"{self.bind_failures:4.0f}  loop lag p99 {self.loop_lag_p99 * 1000:6.1f} ms  "
            f"RSS {self.rss_mib:6.1f} MiB\n         created in {self.created_in:.1f}s; CPU seconds: "
            + ", ".join(f"{k} {v:.1f}" for k, v in sorted(self.cpu.items(), key=lambda kv: -kv[1]))
        )


def scrape(plane: ControlPlane) -> dict[str, float]:
    """Counters of our process: filters, failed binds, and the loop-lag p99 from its buckets."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(plane.metrics_url, timeout=10) as response:
        text = response.read().decode()
    out = {"filters": 0.0, "bind_failures": 0.0}
    buckets: list[tuple[float, float]] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "hami_filter_duration_seconds_count":
                out["filters"] += s.value
            elif s.name == "hami_bind_duration_seconds_count" and s.labels["result"] == "error":
                out["bind_failures"] += s.value
            elif s.name == "hami_event_loop_lag_seconds_bucket":
                buckets.append((float(s.labels["le"]), s.value))
    buckets.sort()
    total = buckets[-1][1] if buckets else 0
    out["loop_lag_p99"] = next((le for le, n in buckets if total and n >= 0.99 * total), 0.0)
    return out


def rss_mib(plane: ControlPlane) -> float:
    app = plane.app
    if app is None:
        return float("nan")
    status = Path(f"/proc/{app.popen.pid}/status").read_text()
    rss = next(row for row in status.splitlines() if row.startswith("VmRSS:"))
    return int(rss.split()[1]) / 1024


def cpu_seconds(plane: ControlPlane) -> dict[str, float]:
    """CPU time (user + system) of each live component, by name without the start counter."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for process in plane.processes():
        try:
            fields = Path(f"/proc/{process.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        name = process.name.split(".")[0]
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def pod_manifest(name: str, gpu: bool, node_policy: str) -> dict[str, object]:
    resources = (
        {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}}
        if gpu
        else {"requests": {"cpu": "10m", "memory": "16Mi"}}
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "annotations": {"hami.io/node-scheduler-policy": node_policy} if gpu else {},
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "busybox", "resources": resources}],
        },
    }


async def run_once(
    plane: ControlPlane,
    label: str,
    namespace: str,
    pods: int,
    gpu: bool,
    node_policy: str,
    deadline: float,
) -> Run:
    api = await config.new_client_from_config(str(plane.kubeconfig))
    core = client.CoreV1Api(api)
    try:
        ns: Any = {"metadata": {"name": namespace}}
        await core.create_namespace(ns)
        before = scrape(plane)
        cpu_before = cpu_seconds(plane)
        created: dict[str, float] = {}
        bound: dict[str, float] = {}
        done = asyncio.Event()

        async def follow() -> None:
            w = watch.Watch()
            async with w.stream(
                core.list_namespaced_pod, namespace, _request_timeout=3600
            ) as stream:
                async for event in stream:
                    pod = event["object"]
                    if pod.spec.node_name and pod.metadata.name not in bound:
                        bound[pod.metadata.name] = time.monotonic()
                        if len(bound) == pods:
                            done.set()
                            return

        follower = asyncio.create_task(follow())
        await asyncio.sleep(0.5)  # the watch is open before the first create
        limit = asyncio.Semaphore(32)

        async def create(i: int) -> None:
            name = f"p-{i:05d}"
            async with limit:
                created[name] = time.monotonic()
                body: Any = pod_manifest(name, gpu, node_policy)
                await core.create_namespaced_pod(namespace, body, _preload_content=False)

        started = time.monotonic()
        await asyncio.gather(*(create(i) for i in range(pods)))
        created_in = time.monotonic() - started
        try:
            await asyncio.wait_for(done.wait(), max(1.0, deadline - time.monotonic()))
        except TimeoutError:
            print(f"{label}: {len(bound)}/{pods} bound before the deadline", file=sys.stderr)
        follower.cancel()
        last = max(bound.values(), default=started)
        after = scrape(plane)
        cpu_after = cpu_seconds(plane)
        return Run(
            label=label,
            pods=pods,
            seconds=last - started,
            latencies=[bound[n] - created[n] for n in bound],
            bound=len(bound),
            filters=(after["filters"] - before["filters"]) / pods,
            bind_failures=after["bind_failures"] - before["bind_failures"],
            loop_lag_p99=after["loop_lag_p99"],
            rss_mib=rss_mib(plane),
            created_in=created_in,
            cpu={k: v - cpu_before.get(k, 0.0) for k, v in cpu_after.items()},
        )
    finally:
        await api.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods", type=int, default=2000)
    p.add_argument("--node-policy", choices=("spread", "binpack"), default="spread")
    p.add_argument("--timeout", type=float, default=600, help="seconds for each run at most")
    p.add_argument("--skip-ceiling", action="store_true")
    p.add_argument("--app-arg", action="append", default=[], help="extra `hami serve` flag")
    p.add_argument(
        "--without-admission-policy",
        action="store_true",
        help="remove the chart's ValidatingAdmissionPolicy binding, to measure what it costs",
    )
    args = p.parse_args(argv)
    if args.pods > 20_000 or args.nodes > 5_000:
        p.error("bounded: at most 20,000 pods and 5,000 nodes")
    with ControlPlane(ensure_binaries(), app_args=args.app_arg) as plane:
        if args.without_admission_policy:
            plane.kubectl("delete", "validatingadmissionpolicybinding", "hami-scheduling-state")
        t0 = time.monotonic()
        plane.start_nodesim([t4_node(f"n{i:04d}") for i in range(args.nodes)])
        print(
            f"{args.nodes} nodes registered in {time.monotonic() - t0:.1f}s; run folder {plane.run_dir}"
        )
        runs = [("gpu", True)] + ([] if args.skip_ceiling else [("ceiling", False)])
        results = []
        for label, gpu in runs:
            result = asyncio.run(
                run_once(
                    plane,
                    label,
                    f"bench-{label}",
                    args.pods,
                    gpu,
                    args.node_policy,
                    time.monotonic() + args.timeout,
                )
            )
            print(result.line(), flush=True)
            results.append(result)
        if len(results) == 2 and results[1].seconds:
            share = (results[0].bound / results[0].seconds) / (
                results[1].bound / results[1].seconds
            )
            print(f"gpu pods/s = {share * 100:.0f}% of the ceiling")
        (plane.run_dir / "throughput.json").write_text(
            json.dumps([r.__dict__ | {"latencies": None} for r in results], indent=2)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
