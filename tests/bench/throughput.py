"""End-to-end scheduling throughput through a real kube-apiserver and kube-scheduler.

    python -m tests.bench.throughput                      # 1,000 nodes: 600, 2,000 and 5,000
                                                          # GPU pods, a backlog of 2,000, the ceiling
    python -m tests.bench.throughput --nodes 100 --bursts 300 --backlog 0 --ceiling 300
    python -m tests.bench.throughput --nodes 5000 --bursts 1000 --backlog 0 --ceiling 0

Starts the e2e control plane (etcd, kube-apiserver, `hami serve`, kube-scheduler, all on
127.0.0.1), registers N fake GPU nodes with the node simulator (which plays kubelet and HAMi's
device plugin, one worker per node), then, one run after the other on the same plane:

* **gpu-N-POLICY**: a burst of N pods asking for one card share each (`nvidia.com/gpu: 1`,
  `gpumem`) under node policy POLICY, created as fast as the API server takes them, through our
  webhook, /filter and /bind; every burst runs under each of --node-policies (spread, then
  binpack, which fills one node at a time and so meets HAMi's node lock on every bind);
* **backlog-N**: N such pods created while kube-scheduler is stopped (SIGSTOP), then drained;
* **ceiling-N**: N pods asking for CPU only, created while kube-scheduler is stopped and then
  scheduled by the same profile without calling the extender: the rate this machine schedules
  any pod at.

kube-scheduler runs with its API client limits raised (--scheduler-qps/--scheduler-burst): at
its defaults (50/s, bursts of 100) the ceiling is kube-scheduler's own throttle, not the
machine. For each run it prints pods bound per second, create-to-bound p50/p99, stage latencies,
bind failures by reason and per pod, API writes per pod by verb and resource (every client, from
kube-apiserver's counters, and ours), creates refused because our webhook could not be reached,
CPU per GPU pod by component and the bound it implies (cores / CPU per pod), our own CPU per
pod, and a final check from a fresh LIST: every bound GPU pod's allocation names only cards of
its own node, the node simulator refused no Allocate, no card is over capacity, no node lock
is left. Bounded: every wait has a deadline, each run stops after --timeout seconds whatever
happened, and pods are deleted between runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes_asyncio import client, config, watch

from tests.bench.scrape import Sample, quantile, rss_mib, sample
from tests.e2e import invariant
from tests.e2e.cluster import ControlPlane, ensure_binaries
from tests.e2e.nodespec import t4_node

CREATES_IN_FLIGHT = 32


@dataclass
class Run:
    label: str
    pods: int
    gpu: bool
    seconds: float
    bound: int
    latencies: list[float]
    created_in: float
    create_errors: int
    delta: Sample
    stages: dict[str, tuple[float, float]]  # p50, p99 seconds of each stage's histogram
    rss_mib: float
    problems: list[str] = field(default_factory=list)
    # A small tenant's pods created among the burst's (--tenant): create->bound seconds, and
    # the binds of theirs that failed (BindingFailed Events).
    tenant: list[float] = field(default_factory=list)
    tenant_failed_binds: int = 0

    @property
    def failed_binds_per_pod(self) -> float:
        return sum(self.delta.bind_failures.values()) / max(1, self.bound)

    @property
    def rate(self) -> float:
        return self.bound / self.seconds if self.seconds else 0.0

    def cpu_ms_per_pod(self) -> dict[str, float]:
        return {k: 1000 * v / max(1, self.bound) for k, v in self.delta.cpu.items()}

    def bound_rate(self, cores: int) -> float:
        """Pods a second this machine could bind at this run's CPU cost per pod."""
        per_pod = sum(self.cpu_ms_per_pod().values()) / 1000
        return cores / per_pod if per_pod else float("inf")

    def figures(self, cores: int) -> dict[str, Any]:
        """What report() prints, as JSON-ready numbers."""
        d = self.delta
        per_pod = max(1, self.bound)
        return {
            "label": self.label,
            "pods": self.pods,
            "bound": self.bound,
            "seconds": self.seconds,
            "rate": self.rate,
            "created_in": self.created_in,
            "create_errors": self.create_errors,
            "webhook_errors": d.webhook_errors,
            "filters_per_pod": d.filters / max(1, self.pods),
            "bind_failures": dict(d.bind_failures),
            "failed_binds_per_pod": self.failed_binds_per_pod,
            "writes_per_pod": {k: v / per_pod for k, v in d.all_writes.items()},
            "our_writes_per_pod": {k: v / per_pod for k, v in d.our_writes.items()},
            "cpu_ms_per_pod": self.cpu_ms_per_pod(),
            "bound_rate": self.bound_rate(cores),
            "stages_p50_p99_s": self.stages,
            "rss_mib": self.rss_mib,
            "problems": self.problems,
            "tenant_p50_max_s": _p50_max(self.tenant),
            "tenant_failed_binds": self.tenant_failed_binds,
        }

    def report(self, cores: int) -> str:
        lat = sorted(self.latencies) or [float("nan")]
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        stages = ", ".join(
            f"{k} {p50 * 1000:.0f}/{p99 * 1000:.0f}" for k, (p50, p99) in self.stages.items()
        )
        per_pod = self.cpu_ms_per_pod()
        writes = "; ".join(
            f"{k} {v / max(1, self.bound):.2f}" for k, v in sorted(self.delta.all_writes.items())
        )
        ours = "; ".join(
            f"{k} {v / max(1, self.bound):.2f}" for k, v in sorted(self.delta.our_writes.items())
        )
        failures = ", ".join(f"{k} {v}" for k, v in sorted(self.delta.bind_failures.items()))
        lines = [
            f"{self.label:12} {self.bound:>5}/{self.pods} bound in {self.seconds:6.1f}s "
            f"{self.rate:6.1f} pods/s  create->bound p50 {statistics.median(lat):.2f}s "
            f"p99 {p99:.2f}s  filters/pod {self.delta.filters / max(1, self.pods):.2f}",
            f"  created in {self.created_in:.1f}s, {self.create_errors} creates failed, "
            f"{self.delta.webhook_errors:.0f} refused for a webhook call error; "
            f"bind failures: {failures or 'none'} ({self.failed_binds_per_pod:.2f} per pod)",
            f"  p50/p99 ms (histogram bounds): {stages}",
            "  CPU ms per pod: "
            + ", ".join(f"{k} {v:.1f}" for k, v in sorted(per_pod.items(), key=lambda kv: -kv[1]))
            + f"; total {sum(per_pod.values()):.1f} -> bound {self.bound_rate(cores):.1f} pods/s "
            f"on {cores} cores",
            f"  API writes per pod, all clients: {writes}",
            f"  ... of which ours: {ours or 'none'}",
            f"  final check (fresh LIST): {'; '.join(self.problems) or 'consistent'}; "
            f"our RSS {self.rss_mib:.0f} MiB",
        ]
        if self.tenant:
            p50, top = _p50_max(self.tenant)
            lines.append(
                f"  small tenant: {len(self.tenant)} pods, create->bound p50 {p50:.2f}s max "
                f"{top:.2f}s, {self.tenant_failed_binds} failed binds"
            )
        return "\n".join(lines)


def _p50_max(values: list[float]) -> tuple[float, float]:
    return (statistics.median(values), max(values)) if values else (float("nan"), float("nan"))


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


def kube_scheduler_pid(plane: ControlPlane) -> int:
    return next(p.popen.pid for p in plane.processes() if p.name == "kube-scheduler")


async def run_once(
    plane: ControlPlane,
    label: str,
    pods: int,
    *,
    gpu: bool,
    backlog: bool,
    node_policy: str,
    deadline: float,
    tenant: int = 0,
) -> Run:
    namespace = f"bench-{label}"
    small = f"{namespace}-tenant"
    api = await config.new_client_from_config(str(plane.kubeconfig))
    core = client.CoreV1Api(api)
    try:
        ns: Any = {"metadata": {"name": namespace}}
        await core.create_namespace(ns)
        if tenant:
            await core.create_namespace({"metadata": {"name": small}})  # type: ignore[arg-type]
        created: dict[str, float] = {}
        bound: dict[str, float] = {}
        tenant_created: dict[str, float] = {}
        tenant_bound: dict[str, float] = {}
        tenant_done = asyncio.Event()
        running: set[str] = set()
        done, started_all = asyncio.Event(), asyncio.Event()

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
                    if pod.status.phase == "Running":
                        running.add(pod.metadata.name)
                        if len(running) == pods:
                            started_all.set()
                            return

        async def follow_tenant() -> None:
            w = watch.Watch()
            async with w.stream(core.list_namespaced_pod, small, _request_timeout=3600) as stream:
                async for event in stream:
                    pod = event["object"]
                    if pod.spec.node_name and pod.metadata.name not in tenant_bound:
                        tenant_bound[pod.metadata.name] = time.monotonic()
                        if len(tenant_bound) == tenant:
                            tenant_done.set()
                            return

        follower = asyncio.create_task(follow())
        tenant_follower = asyncio.create_task(follow_tenant()) if tenant else None
        await asyncio.sleep(0.5)  # the watch is open before the first create
        # The tenant's pods go in evenly among the burst's, each after its share of them.
        tenant_after = {(j + 1) * pods // (tenant + 1): j for j in range(tenant)}
        limit = asyncio.Semaphore(CREATES_IN_FLIGHT)
        errors = 0

        async def create(i: int) -> None:
            nonlocal errors
            name = f"p-{i:05d}"
            async with limit:
                created[name] = time.monotonic()
                body: Any = pod_manifest(name, gpu, node_policy)
                try:
                    await core.create_namespaced_pod(namespace, body, _preload_content=False)
                except client.ApiException as e:
                    errors += 1
                    print(f"{label}: create {name} failed: {e.status} {e.reason}", file=sys.stderr)
                if i in tenant_after:
                    other = f"t-{tenant_after[i]:03d}"
                    tenant_created[other] = time.monotonic()
                    body = pod_manifest(other, gpu, node_policy)
                    with contextlib.suppress(client.ApiException):
                        await core.create_namespaced_pod(small, body, _preload_content=False)

        scheduler = kube_scheduler_pid(plane)
        before = sample(plane, plane.metrics_url, plane.scheduler_port, cpu_first=False)
        if backlog:
            os.killpg(scheduler, signal.SIGSTOP)
        started = time.monotonic()
        try:
            await asyncio.gather(*(create(i) for i in range(pods)))
        finally:
            created_in = time.monotonic() - started
            if backlog:
                started = time.monotonic()  # the drain starts now
                created = dict.fromkeys(created, started)
                os.killpg(scheduler, signal.SIGCONT)
        try:
            await asyncio.wait_for(done.wait(), max(1.0, deadline - time.monotonic()))
            # The writes a pod costs include the device plugin's and the kubelet's after the
            # Binding: counted once every pod runs.
            await asyncio.wait_for(started_all.wait(), max(1.0, deadline - time.monotonic()))
        except TimeoutError:
            print(
                f"{label}: {len(bound)}/{pods} bound, {len(running)} running before the deadline",
                file=sys.stderr,
            )
        follower.cancel()
        if tenant_follower is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(tenant_done.wait(), max(1.0, deadline - time.monotonic()))
            tenant_follower.cancel()
        last = max(bound.values(), default=started)
        after = sample(plane, plane.metrics_url, plane.scheduler_port)
        app = plane.app
        run = Run(
            label=label,
            pods=pods,
            gpu=gpu,
            seconds=last - started,
            bound=len(bound),
            latencies=[bound[n] - created[n] for n in bound],
            created_in=created_in,
            create_errors=errors,
            delta=after.minus(before),
            stages={
                k: (quantile(v, before.histograms[k], 0.5), quantile(v, before.histograms[k], 0.99))
                for k, v in after.histograms.items()
                if v != before.histograms[k]
            },
            rss_mib=rss_mib(app.popen.pid) if app is not None else float("nan"),
        )
        run.problems = final_check(plane, namespace, pods, len(bound))
        if tenant:
            run.tenant = [tenant_bound[n] - tenant_created[n] for n in tenant_bound]
            events = await core.list_namespaced_event(small)
            run.tenant_failed_binds = sum(
                e.count or 1 for e in events.items if e.reason == "BindingFailed"
            )
            await core.delete_collection_namespaced_pod(small, grace_period_seconds=0)
        await core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        return run
    finally:
        await api.close()


def final_check(plane: ControlPlane, namespace: str, pods: int, bound: int) -> list[str]:
    """What a fresh LIST says after the run, once the device plugin's lock releases settled."""
    problems = [] if bound == pods else [f"{pods - bound} pods not bound"]
    problems += invariant.misplaced(plane.kube, namespace)[:10]
    problems += invariant.overcommitted(plane.kube)[:10]
    settle = time.monotonic() + 30
    while (locks := invariant.locks_left(plane.kube)) and time.monotonic() < settle:
        time.sleep(1)
    problems += [f"node lock left on {node}: {value}" for node, value in locks.items()]
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--bursts", default="600,2000,5000", help="GPU pods per burst, in order")
    p.add_argument("--backlog", type=int, default=2000, help="GPU pods of the backlog (0: none)")
    p.add_argument("--ceiling", type=int, default=600, help="CPU-only pods (0: none)")
    p.add_argument(
        "--node-policies",
        default="spread,binpack",
        help="the bursts run once under each of these node policies (hami.io/node-scheduler-"
        "policy), in order; the backlog under the first",
    )
    p.add_argument("--timeout", type=float, default=600, help="seconds for each run at most")
    p.add_argument(
        "--allocate-delay",
        type=float,
        default=0.0,
        help="seconds each simulated device plugin takes over an Allocate (a slow plugin: the "
        "node lock is held that long after each bind)",
    )
    p.add_argument(
        "--tenant",
        type=int,
        default=0,
        help="pods of a small tenant (a namespace of its own) created evenly among each GPU "
        "burst's; their create->bound time and failed binds are reported",
    )
    p.add_argument("--scheduler-qps", type=float, default=1000)
    p.add_argument("--scheduler-burst", type=int, default=2000)
    p.add_argument("--app-arg", action="append", default=[], help="extra `hami serve` flag")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    bursts = [int(n) for n in args.bursts.split(",") if n.strip()]
    policies = [n.strip() for n in args.node_policies.split(",") if n.strip()]
    if not policies or not set(policies) <= {"spread", "binpack"}:
        p.error("--node-policies: spread and/or binpack")
    if max([*bursts, args.backlog, args.ceiling]) > 20_000 or args.nodes > 5_000:
        p.error("bounded: at most 20,000 pods a run and 5,000 nodes")
    cores = os.cpu_count() or 1
    plane = ControlPlane(
        ensure_binaries(),
        app_args=args.app_arg,
        scheduler_client=(args.scheduler_qps, args.scheduler_burst),
    )
    with plane:
        t0 = time.monotonic()
        plane.start_nodesim(
            [
                replace(t4_node(f"n{i:04d}"), allocate_delay=args.allocate_delay)
                for i in range(args.nodes)
            ]
        )
        print(
            f"{args.nodes} nodes registered in {time.monotonic() - t0:.1f}s; kube-scheduler "
            f"client qps {args.scheduler_qps:g} burst {args.scheduler_burst}; "
            f"run folder {plane.run_dir}",
            flush=True,
        )
        first = policies[0]
        plan = [
            (f"gpu-{n}-{policy}", n, True, False, policy) for policy in policies for n in bursts
        ]
        plan += (
            [(f"backlog-{args.backlog}-{first}", args.backlog, True, True, first)]
            if args.backlog
            else []
        )
        # The ceiling drains a backlog too: created as fast as the API server takes them, plain
        # pods would be bound as fast as they are created, which measures the creates.
        plan += (
            [(f"ceiling-{args.ceiling}", args.ceiling, False, True, first)] if args.ceiling else []
        )
        runs = []
        for label, pods, gpu, backlog, policy in plan:
            run = asyncio.run(
                run_once(
                    plane,
                    label,
                    pods,
                    gpu=gpu,
                    backlog=backlog,
                    node_policy=policy,
                    deadline=time.monotonic() + args.timeout,
                    tenant=args.tenant if gpu and not backlog else 0,
                )
            )
            print(run.report(cores), flush=True)
            runs.append(run)
        print(verdict(runs, cores), flush=True)
        if args.json:
            figures = [r.figures(cores) for r in runs]
            with open(args.json, "w") as out:
                json.dump(figures, out, indent=2, default=str)
    return 0


def verdict(runs: list[Run], cores: int) -> str:
    """The issue's targets, each with this run's figure."""
    gpu = [r for r in runs if r.gpu]
    lines = ["targets:"]
    if gpu:
        reference = gpu[0]
        for r in gpu[1:]:
            share = r.rate / reference.rate if reference.rate else 0.0
            lines.append(
                f"  {r.label}: {r.rate:.1f} pods/s = {share * 100:.0f}% of {reference.label}'s "
                f"{reference.rate:.1f} (target >= 90%)"
            )
        for r in gpu:
            limit = r.bound_rate(cores)
            ours = r.cpu_ms_per_pod().get("hami-serve", float("nan"))
            lines.append(
                f"  {r.label}: {r.rate:.1f} pods/s = {r.rate / limit * 100:.0f}% of the "
                f"{limit:.1f} its CPU per pod allows (target >= 90%); ours {ours:.1f} ms/pod "
                f"(target <= 4); wrong or missing allocations {len(r.problems)} (target 0); "
                f"webhook errors {r.delta.webhook_errors + r.create_errors:.0f} (target 0); "
                f"failed binds {r.failed_binds_per_pod:.2f} per pod (target <= 0.1)"
            )
    ceiling = [r for r in runs if not r.gpu]
    if ceiling and gpu:
        lines.append(
            f"  ceiling: {ceiling[0].rate:.1f} plain pods/s; {gpu[0].label} at "
            f"{gpu[0].rate / ceiling[0].rate * 100:.0f}% of it"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
