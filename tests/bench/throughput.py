"""End-to-end scheduling throughput through a real kube-apiserver and kube-scheduler.

    python -m tests.bench.throughput                      # 1,000 nodes: 600, 2,000 and 5,000
                                                          # GPU pods, a backlog of 2,000, the ceiling
    python -m tests.bench.throughput --nodes 100 --bursts 300 --backlog 0 --ceiling 300
    python -m tests.bench.throughput --nodes 5000 --bursts 1000 --backlog 0 --ceiling 0
    python -m tests.bench.throughput --nodes 1000 --bursts 2000 --backlog 0 --ceiling 0 --load

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
is left. It also prints the time each run took, the binds whose outcome was unknown and how
each ended, and whether a refusal was permanent (tests/bench/report.py). The nodes are waited
for until every component sees them (tests/bench/nodes.py); `--load [N]` runs N busy processes
beside the runs (tests/bench/load.py). Bounded: every wait has a deadline, each run stops after
--timeout seconds whatever happened, and pods are deleted between runs, once the run's figures
are printed and written (a failed delete is a warning).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
from typing import Any

from kubernetes_asyncio import client, config

from hami.engine.dra.config import DEFAULT_CLASSES
from tests.bench import load
from tests.bench.drapublish import publish, release_claims
from tests.bench.nodes import register
from tests.bench.pods import Tracker, delete_pods, pod_manifest
from tests.bench.report import Run, final_check, liveness, read_sample, stop_quietly, write_json
from tests.bench.scrape import quantile, rss_mib
from tests.e2e.cluster import ControlPlane, ensure_binaries
from tests.e2e.draworld import device_class


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
) -> Run:
    namespace = f"bench-{label}"
    api = await config.new_client_from_config(str(plane.kubeconfig))
    core = client.CoreV1Api(api)
    try:
        ns: Any = {"metadata": {"name": namespace}}
        await core.create_namespace(ns)
        tracker = Tracker(core, {namespace: pods})
        names = [f"p-{i:05d}" for i in range(pods)]
        async with tracker.following():
            scheduler = kube_scheduler_pid(plane)
            before = read_sample(plane, cpu_first=False)
            if backlog:
                os.killpg(scheduler, signal.SIGSTOP)
            started = time.monotonic()
            try:
                await tracker.create(namespace, names, lambda n: pod_manifest(n, gpu, node_policy))
            finally:
                created_in = time.monotonic() - started
                if backlog:
                    started = time.monotonic()  # the drain starts now
                    tracker.restart_clock(namespace, started)
                    os.killpg(scheduler, signal.SIGCONT)
            await tracker.wait(deadline, label)
        bound = tracker.bound[namespace]
        last = max(bound.values(), default=started)
        after = read_sample(plane)
        app = plane.app
        run = Run(
            label=label,
            pods=pods,
            gpu=gpu,
            seconds=last - started,
            bound=len(bound),
            latencies=tracker.latencies(namespace),
            created_in=created_in,
            create_errors=tracker.create_errors,
            delta=after.minus(before),
            stages={
                k: (quantile(v, before.histograms[k], 0.5), quantile(v, before.histograms[k], 0.99))
                for k, v in after.histograms.items()
                if v != before.histograms[k]
            },
            rss_mib=rss_mib(app.popen.pid) if app is not None else float("nan"),
            load=load.load_average(),
        )
        run.liveness = liveness(plane, run.delta, pods - len(bound))
        run.problems = final_check(plane, [namespace], pods - len(bound))
        return run
    finally:
        await api.close()


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
    p.add_argument("--scheduler-qps", type=float, default=1000)
    p.add_argument("--scheduler-burst", type=int, default=2000)
    p.add_argument(
        "--dra",
        action="store_true",
        help="publish every node's cards as DRA ResourceSlices with a claim on each node "
        "(tests/bench/drapublish.py) before the runs",
    )
    p.add_argument(
        "--dra-mode",
        action="store_true",
        help="the GPU pods in DRA mode (implies --dra): `hami serve --dra-mode=all` and "
        "HAMi-DRA's DeviceClasses; the webhook moves each pod's GPU into a claim and gates "
        "it, the placer pins the claim and lifts the gate, kube-scheduler allocates and binds",
    )
    p.add_argument("--app-arg", action="append", default=[], help="extra `hami serve` flag")
    p.add_argument("--json", help="also write the figures to this file (after each run)")
    p.add_argument(
        "--register-timeout",
        type=float,
        default=900,
        help="seconds for the nodes to be registered and seen by every component, at most",
    )
    load.add_arguments(p)
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
        app_args=[*args.app_arg, *(["--dra-mode=all"] if args.dra_mode else [])],
        scheduler_client=(args.scheduler_qps, args.scheduler_burst),
    )
    with load.Hog(args.load, args.load_seconds):
        plane.__enter__()
        try:
            register(plane, args.nodes, args.register_timeout)
            if args.dra_mode:
                for c in DEFAULT_CLASSES:
                    plane.kubectl(
                        "apply", "-f", "-", stdin=json.dumps(device_class(c.device_class))
                    )
            if args.dra or args.dra_mode:
                publish(plane, args.nodes, args.register_timeout)
            print(
                f"kube-scheduler client qps {args.scheduler_qps:g} burst "
                f"{args.scheduler_burst}; {load.load_average()}; run folder {plane.run_dir}",
                flush=True,
            )
            runs = run_all(plane, args, bursts, policies, cores)
            print(verdict(runs, cores), flush=True)
        finally:
            stop_quietly(plane)
    return 0


def run_all(
    plane: ControlPlane,
    args: argparse.Namespace,
    bursts: list[int],
    policies: list[str],
    cores: int,
) -> list[Run]:
    """Each run in turn; its figures are printed and written before its pods are deleted."""
    first = policies[0]
    plan = [(f"gpu-{n}-{policy}", n, True, False, policy) for policy in policies for n in bursts]
    plan += (
        [(f"backlog-{args.backlog}-{first}", args.backlog, True, True, first)]
        if args.backlog
        else []
    )
    # The ceiling drains a backlog too: created as fast as the API server takes them, plain
    # pods would be bound as fast as they are created, which measures the creates.
    plan += [(f"ceiling-{args.ceiling}", args.ceiling, False, True, first)] if args.ceiling else []
    runs: list[Run] = []
    for label, pods, gpu, backlog, policy in plan:
        t0 = time.monotonic()
        run = asyncio.run(
            run_once(
                plane,
                label,
                pods,
                gpu=gpu,
                backlog=backlog,
                node_policy=policy,
                deadline=t0 + args.timeout,
            )
        )
        run.run_seconds = time.monotonic() - t0
        print(run.report(cores), flush=True)
        runs.append(run)
        write_json(args.json, [r.figures(cores) for r in runs])
        asyncio.run(delete_pods(str(plane.kubeconfig), f"bench-{label}"))
        if args.dra_mode:
            asyncio.run(release_claims(str(plane.kubeconfig), f"bench-{label}"))
    return runs


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
