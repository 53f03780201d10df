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
the p50/p99 of each stage (our webhook, filter, bind and event-loop lag from our histograms;
kube-scheduler's scheduling cycle, which includes our /filter and is serial, and its wait for our
bind), CPU seconds per component and our RSS. Bounded: every wait has a
deadline and the run stops after `--timeout` seconds whatever happened.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import statistics
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config, watch
from prometheus_client.core import Metric
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
    stages: dict[str, tuple[float, float]]  # p50, p99 seconds of each stage's histogram
    rss_mib: float
    created_in: float
    cpu: dict[str, float]

    def line(self) -> str:
        lat = sorted(self.latencies) or [float("nan")]
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        rate = self.bound / self.seconds if self.seconds else 0.0
        stages = ", ".join(
            f"{k} {p50 * 1000:.0f}/{p99 * 1000:.0f}" for k, (p50, p99) in self.stages.items()
        )
        return (
            f"{self.label:8} {self.bound:>5}/{self.pods} bound in {self.seconds:6.1f}s  "
            f"{rate:7.1f} pods/s  create->bound p50 {statistics.median(lat):6.2f}s "
            f"p99 {p99:6.2f}s  filters/pod {self.filters:5.2f}  bind failures "
            f"{self.bind_failures:4.0f}  RSS {self.rss_mib:6.1f} MiB\n"
            f"         created in {self.created_in:.1f}s; p50/p99 ms (histogram bounds): {stages}\n"
            "         CPU seconds: "
            + ", ".join(f"{k} {v:.1f}" for k, v in sorted(self.cpu.items(), key=lambda kv: -kv[1]))
        )


Buckets = dict[float, float]  # histogram upper bound -> cumulative count


def _fetch(url: str, context: ssl.SSLContext | None = None) -> str:
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    with opener.open(url, timeout=10) as response:
        return str(response.read().decode())


def _histograms(
    families: list[Metric], wanted: dict[str, tuple[str, dict[str, str]]]
) -> dict[str, Buckets]:
    """Cumulative buckets of the wanted histograms (key -> (family, label filter)), summed over
    the series that match the filter."""
    out: dict[str, Buckets] = {key: {} for key in wanted}
    for family in families:
        for key, (name, match) in wanted.items():
            if family.name != name:
                continue
            for s in family.samples:
                if s.name.endswith("_bucket") and all(
                    s.labels.get(k) == v for k, v in match.items()
                ):
                    le = float(s.labels["le"])
                    out[key][le] = out[key].get(le, 0.0) + s.value
    return out


def quantile(after: Buckets, before: Buckets, q: float) -> float:
    """The bucket bound under which a fraction q of the observations between two scrapes fell."""
    delta = sorted((le, n - before.get(le, 0.0)) for le, n in after.items())
    total = delta[-1][1] if delta else 0.0
    return next((le for le, n in delta if total and n >= q * total), float("nan"))


OURS: dict[str, tuple[str, dict[str, str]]] = {
    "filter": ("hami_filter_duration_seconds", {}),
    "bind": ("hami_bind_duration_seconds", {}),
    "webhook": ("hami_admission_duration_seconds", {}),
    "loop_lag": ("hami_event_loop_lag_seconds", {}),
}
# kube-scheduler's own view: one scheduling cycle (its filters and our /filter, serial) and the
# extender's bind as it waited for it.
KUBE_SCHEDULER: dict[str, tuple[str, dict[str, str]]] = {
    "cycle": ("scheduler_scheduling_algorithm_duration_seconds", {}),
    "bind (kube-scheduler)": (
        "scheduler_framework_extension_point_duration_seconds",
        {"extension_point": "Bind"},
    ),
}


def scrape(plane: ControlPlane) -> tuple[dict[str, float], dict[str, Buckets]]:
    """Counters of our process (filters, failed binds) and the latency histograms of our process
    and of kube-scheduler, for per-run quantiles. Our /metrics is read once: at 1,000 nodes it
    is tens of MiB."""
    ours = list(text_string_to_metric_families(_fetch(plane.metrics_url)))
    counters = {"filters": 0.0, "bind_failures": 0.0}
    for family in ours:
        for s in family.samples:
            if s.name == "hami_filter_duration_seconds_count":
                counters["filters"] += s.value
            elif s.name == "hami_bind_duration_seconds_count" and s.labels["result"] == "error":
                counters["bind_failures"] += s.value
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # kube-scheduler's self-signed serving certificate
    scheduler = _fetch(f"https://127.0.0.1:{plane.scheduler_port}/metrics", context)
    histograms = _histograms(ours, OURS) | _histograms(
        list(text_string_to_metric_families(scheduler)), KUBE_SCHEDULER
    )
    return counters, histograms


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
        before, hist_before = scrape(plane)
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
        after, hist_after = scrape(plane)
        cpu_after = cpu_seconds(plane)
        return Run(
            label=label,
            pods=pods,
            seconds=last - started,
            latencies=[bound[n] - created[n] for n in bound],
            bound=len(bound),
            filters=(after["filters"] - before["filters"]) / pods,
            bind_failures=after["bind_failures"] - before["bind_failures"],
            stages={
                k: (quantile(v, hist_before[k], 0.5), quantile(v, hist_before[k], 0.99))
                for k, v in hist_after.items()
                if v != hist_before[k]
            },
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
