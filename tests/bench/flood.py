"""`python -m tests.bench.flood`: a small tenant behind a binpack flood, on the real control plane.

    python -m tests.bench.flood                      # 100 nodes, a 2,000-pod flood, 20-pod tenant
    python -m tests.bench.flood --load               # the same beside a CPU hog of 2x the cores
    python -m tests.bench.flood --nodes 50 --flood 200 --small 20 --runs 2 --load 4

Starts the e2e control plane (etcd, kube-apiserver, `hami serve`, kube-scheduler, all on
127.0.0.1) and N fake nodes of four T4s split 10 (the node simulator plays kubelet and the
device plugin), then, --runs times: one namespace creates --flood pods of one 1000 MiB share each
under the binpack policy (every bind meets a node lock), and once --small-after of them are
created a second namespace creates --small such pods: the small tenant, whose pods wait in
kube-scheduler's queue among the flood's. For each run it prints the time the run took, the small
tenant's create-to-bound wait (p50, max), failed binds per pod by reason, the binds whose outcome
was unknown and how each ended, and whether a refusal was permanent (pods still Pending at the
deadline with `/readyz` failing). Figures only, nothing asserted: the machine's load decides the
times. Bounded: each run stops after --timeout seconds whatever happened; pods are deleted
between runs, a failed delete being a warning once the run's figures are out.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client, config

from tests.bench import load
from tests.bench.nodes import register
from tests.bench.pods import Tracker, delete_pods, pod_manifest
from tests.bench.report import (
    Liveness,
    final_check,
    liveness,
    read_sample,
    stop_quietly,
    write_json,
)
from tests.bench.scrape import Sample
from tests.e2e.cluster import ControlPlane, ensure_binaries

SHARES_PER_NODE = 40  # four T4s, each split 10 (tests.e2e.nodespec.t4_node)


@dataclass
class FloodRun:
    label: str
    flood: int
    small: int
    seconds: float  # first create to the last bind
    run_seconds: float  # the whole run: creates, binds, the final check
    flood_bound: int
    small_waits: list[float]  # each small pod's create-to-bound seconds
    delta: Sample
    liveness: Liveness
    problems: list[str]
    load: str

    @property
    def bound(self) -> int:
        return self.flood_bound + len(self.small_waits)

    @property
    def failed_binds_per_pod(self) -> float:
        return sum(self.delta.bind_failures.values()) / max(1, self.bound)

    def figures(self) -> dict[str, Any]:
        waits = sorted(self.small_waits) or [float("nan")]
        return {
            "label": self.label,
            "flood": self.flood,
            "small": self.small,
            "flood_bound": self.flood_bound,
            "small_bound": len(self.small_waits),
            "seconds": self.seconds,
            "run_seconds": self.run_seconds,
            "small_wait_p50_s": statistics.median(waits),
            "small_wait_max_s": waits[-1],
            "bind_failures": dict(self.delta.bind_failures),
            "failed_binds_per_pod": self.failed_binds_per_pod,
            "problems": self.problems,
            "load": self.load,
            **self.liveness.figures(),
        }

    def report(self) -> str:
        f = self.figures()
        failures = ", ".join(f"{k} {v}" for k, v in sorted(self.delta.bind_failures.items()))
        return "\n".join(
            [
                f"{self.label}: flood {self.flood_bound}/{self.flood} and tenant "
                f"{len(self.small_waits)}/{self.small} bound in {self.seconds:.1f}s (the run "
                f"{self.run_seconds:.1f}s); {self.load}",
                f"  small tenant's wait: p50 {f['small_wait_p50_s']:.1f}s, max "
                f"{f['small_wait_max_s']:.1f}s",
                f"  bind failures: {failures or 'none'} ({self.failed_binds_per_pod:.3f} per pod)",
                self.liveness.line(),
                f"  final check (fresh LIST): {'; '.join(self.problems) or 'consistent'}",
            ]
        )


async def flood_once(
    plane: ControlPlane, label: str, args: argparse.Namespace, deadline: float
) -> FloodRun:
    started = time.monotonic()
    flood_ns, small_ns = f"{label}-flood", f"{label}-tenant"
    api = await config.new_client_from_config(str(plane.kubeconfig))
    core = client.CoreV1Api(api)
    try:
        for namespace in (flood_ns, small_ns):
            ns: Any = {"metadata": {"name": namespace}}
            await core.create_namespace(ns)
        tracker = Tracker(core, {flood_ns: args.flood, small_ns: args.small})

        def manifest(name: str) -> dict[str, object]:
            return pod_manifest(name, True, "binpack")

        async with tracker.following():
            before = read_sample(plane, cpu_first=False)
            first = time.monotonic()
            names = [f"flood-{i:05d}" for i in range(args.flood)]
            await tracker.create(flood_ns, names[: args.small_after], manifest)
            # The rest of the flood and the tenant at once, each with its own creates in flight.
            await asyncio.gather(
                tracker.create(flood_ns, names[args.small_after :], manifest),
                tracker.create(small_ns, [f"small-{i:03d}" for i in range(args.small)], manifest),
            )
            await tracker.wait(deadline, label)
        binds = [*tracker.bound[flood_ns].values(), *tracker.bound[small_ns].values()]
        delta = read_sample(plane).minus(before)
        bound = len(binds)
        expected = args.flood + args.small
        return FloodRun(
            label=label,
            flood=args.flood,
            small=args.small,
            seconds=max(binds, default=first) - first,
            run_seconds=time.monotonic() - started,
            flood_bound=len(tracker.bound[flood_ns]),
            small_waits=tracker.latencies(small_ns),
            delta=delta,
            liveness=liveness(plane, delta, expected - bound),
            problems=final_check(plane, [flood_ns, small_ns], expected - bound),
            load=load.load_average(),
        )
    finally:
        await api.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tests.bench.flood",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--nodes", type=int, default=100, help="nodes of four T4s split 10")
    p.add_argument("--flood", type=int, default=2000, help="the flood's pods")
    p.add_argument("--small", type=int, default=20, help="the small tenant's pods")
    p.add_argument(
        "--small-after",
        type=int,
        help="the tenant's creates start once this many flood pods are created "
        "(default: a quarter of the flood)",
    )
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--timeout", type=float, default=900, help="seconds for each run at most")
    p.add_argument("--register-timeout", type=float, default=900)
    p.add_argument("--scheduler-qps", type=float, default=1000)
    p.add_argument("--scheduler-burst", type=int, default=2000)
    p.add_argument("--app-arg", action="append", default=[], help="extra `hami serve` flag")
    p.add_argument(
        "--allocate-delay", type=float, default=0.0, help="seconds each simulated Allocate takes"
    )
    p.add_argument("--json", help="also write the figures to this file (after each run)")
    load.add_arguments(p)
    args = p.parse_args(argv)
    if args.small_after is None:
        args.small_after = args.flood // 4
    if not 1 <= args.runs <= 20 or args.nodes > 5_000 or args.flood + args.small > 20_000:
        p.error("bounded: 1 to 20 runs, at most 5,000 nodes and 20,000 pods a run")
    if args.flood + args.small > SHARES_PER_NODE * args.nodes:
        p.error(f"{args.nodes} nodes hold {SHARES_PER_NODE * args.nodes} pods: raise --nodes")
    plane = ControlPlane(
        ensure_binaries(),
        app_args=args.app_arg,
        scheduler_client=(args.scheduler_qps, args.scheduler_burst),
    )
    runs: list[FloodRun] = []
    with load.Hog(args.load, args.load_seconds):
        plane.__enter__()
        try:
            register(plane, args.nodes, args.register_timeout, args.allocate_delay)
            print(f"{load.load_average()}; run folder {plane.run_dir}", flush=True)
            for i in range(1, args.runs + 1):
                label = f"run-{i}"
                run = asyncio.run(flood_once(plane, label, args, time.monotonic() + args.timeout))
                print(run.report(), flush=True)
                runs.append(run)
                write_json(args.json, [r.figures() for r in runs])
                for namespace in (f"{label}-flood", f"{label}-tenant"):
                    asyncio.run(delete_pods(str(plane.kubeconfig), namespace))
        finally:
            stop_quietly(plane)
    if runs:
        print(summary(runs, os.cpu_count() or 1), flush=True)
    return 0


def summary(runs: list[FloodRun], cores: int) -> str:
    waits = [max(r.small_waits, default=float("nan")) for r in runs]
    return (
        f"{len(runs)} runs on {cores} cores: {sum(r.bound for r in runs)} pods bound of "
        f"{sum(r.flood + r.small for r in runs)}; the tenant's longest wait per run "
        + ", ".join(f"{w:.1f}s" for w in waits)
        + f"; permanent refusals {sum(r.liveness.permanent for r in runs)}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
