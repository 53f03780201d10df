"""`python -m tests.bench.envelope`: every figure of the Kubernetes envelope from one run.

    python -m tests.bench.envelope                         # 5,000 nodes, 150,000 pods (~35 min)
    python -m tests.bench.envelope --nodes 200 --pods 5000 --small-nodes 100 --burst 200

Runs, one after the other on this machine, each bench in its own process (so one's heap and
threads do not weigh on the next):

1. `tests.bench.memory --nodes N --pods 0,P`: cold start to /readyz, our CPU to ready, RSS
   ready, steady with a scraper attached and peak, each scrape's size and CPU;
2. `hami bench --http --nodes N`, once with no pod placed and once with --filter-pods (with
   `--dra`, that once more with the cards also published as ResourceSlices and as many
   allocated ResourceClaims in the pods' place, its rows beside the device-plugin ones; and
   the throughput bench at --small-nodes in DRA mode, `--dra-mode`: every card in a
   ResourceSlice and a claim on each node, tests/bench/drapublish.py, and each GPU pod moved
   into a claim by the webhook, pinned by the placer, allocated by kube-scheduler): /filter
   over HTTPS for a pod that fits and one that fits nowhere, under the spread and the binpack
   node policy, with all N node names and with kube-scheduler's default share of them (500 of
   5,000), the last --in-flight decisions held as binds under way: the whole process's CPU
   (every thread) p50/p99 while the handler ran, and its CPU per request over the series;
3. `tests.bench.throughput` at --small-nodes and at N nodes: a burst of --burst GPU pods under
   spread, then binpack, through the real kube-scheduler: pods/s, failed binds per pod, our
   CPU per pod, the binds whose outcome was unknown, pods left Pending with /readyz failing;

then prints one table: each figure, its target and whether it was met, and by how much not.
The figures of each step are also kept as JSON under --out. Every step is bounded by its own
bench's limits and by --step-timeout; a step that fails is a warning, and the table leaves out
the figures it did not write. `--load [N]` runs a CPU hog of N busy processes (twice the cores
if N is left out) beside every step (tests/bench/load.py).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tests.bench import load

MIB = 1024 * 1024


@dataclass(frozen=True)
class Row:
    figure: str
    value: float
    unit: str
    target: float | None = None  # None: printed for context, no target
    at_most: bool = True  # the target is a ceiling (else a floor)
    note: str = ""

    def verdict(self) -> str:
        if self.target is None:
            return ""
        met = self.value <= self.target if self.at_most else self.value >= self.target
        if met:
            return "met"
        return f"missed by {abs(self.value - self.target):.3g} {self.unit}".rstrip()


def memory_rows(samples: Sequence[Mapping[str, Any]]) -> list[Row]:
    """Cold start, RSS and scrapes, from tests.bench.memory's samples (0 pods first)."""
    base, full = samples[0], samples[-1]
    pods = full["pods"]
    rows = [
        Row(f"cold start to /readyz, {pods} pods", full["ready_s"], "s", 20.0),
        Row(f"our CPU to ready, {pods} pods", full["ready_cpu"], "s"),
        Row("RSS at ready", full["ready_rss"] / MIB, "MiB"),
        Row("RSS steady, scraped", full["steady_rss"] / MIB, "MiB"),
        Row("RSS peak", full["peak"] / MIB, "MiB"),
    ]
    # Below 10,000 pods the process's own noise outweighs what the pods cost.
    if base["pods"] == 0 and pods >= 10_000:
        per10k = (full["steady_rss"] - base["steady_rss"]) / MIB / pods * 10_000
        rows.append(Row("RSS per 10,000 pods", per10k, "MiB", 20.0))
    cpu = sorted(full["scrape_cpu"]) or [float("nan")]
    rows += [
        Row("a scrape on the wire (gzip, as Prometheus asks)", full["scrape_wire"] / 1e6, "MB", 10),
        Row("a scrape as text", full["scrape_text"] / 1e6, "MB"),
        Row("a scrape's CPU, p50", cpu[len(cpu) // 2] * 1000, "ms", 200),
        Row("a scrape's CPU, the most (the first)", cpu[-1] * 1000, "ms", 200),
    ]
    return rows


def filter_rows(pods: int, series: Sequence[Mapping[str, Any]], dra: bool = False) -> list[Row]:
    """Each series of `hami bench --http` at `pods` pods (with `dra`, as many allocated DRA
    claims on cards also published as ResourceSlices): the process's CPU p50 and p99 while
    /filter ran (p99 aims at 5 ms), and the process's CPU per request (TLS and HTTP parsing,
    logging and Events included)."""
    rows = []
    held = "DRA claims" if dra else "pods"
    for figures in series:
        kind = "fits" if figures["fits"] else "fits nowhere"
        policy = figures["node_policy"] or "default"
        name = f"{kind}, {policy}, {figures['candidate_count']} candidates, {pods} {held}"
        rows += [
            Row(f"/filter CPU p50, {name}", figures["process_cpu_p50_ms"], "ms"),
            Row(f"/filter CPU p99, {name}", figures["process_cpu_p99_ms"], "ms", 5.0),
            Row(f"/filter CPU per request, {name}", figures["process_cpu_per_request_ms"], "ms"),
        ]
    return rows


def throughput_rows(
    small_nodes: int,
    small: Sequence[Mapping[str, Any]],
    nodes: int,
    large: Sequence[Mapping[str, Any]],
    world: str = "",
) -> list[Row]:
    """Bursts at both sizes; our CPU per pod aims at 3 ms at the small size and at no more
    than 25 % above that at the large one. `world` names a variant's rows ("DRA, ")."""
    rows: list[Row] = []
    if nodes == small_nodes:  # one throughput step served both sizes
        large = []
    for size, runs, cpu_target in ((small_nodes, small, 3.0), (nodes, large, None)):
        for run in runs:
            name = f"{world}{size} nodes, {run['label']}"
            rows += [
                Row(f"{name} pods/s", run["rate"], "pods/s"),
                Row(f"{name} failed binds per pod", run["failed_binds_per_pod"], "", 0.1),
                Row(f"{name} our CPU per pod", _ours(run), "ms", cpu_target),
            ]
            if "permanent_refusal" in run:  # figures of a bench from before it reported these
                rows += [
                    Row(
                        f"{name} unknown bind outcomes",
                        run["unknown_outcomes"],
                        "",
                        note=""
                        if run["unknown_outcome_metric_present"]
                        else "hami_bind_unknown_outcomes_total absent",
                    ),
                    Row(
                        f"{name} pods left Pending, /readyz failing",
                        run["pending_at_end"] if run["permanent_refusal"] else 0,
                        "",
                        0,
                    ),
                ]
    if small and large:
        reference = min(_ours(r) for r in small)
        worst = max(_ours(r) for r in large)
        rows.append(
            Row(
                f"our CPU per pod, {nodes} nodes over {small_nodes}",
                worst / reference * 100 if reference else float("nan"),
                "%",
                125.0,
                note=f"the worst {worst:.2f} ms against the best {reference:.2f} ms",
            )
        )
    return rows


def _ours(run: Mapping[str, Any]) -> float:
    return float(run["cpu_ms_per_pod"].get("hami-serve", float("nan")))


def table(rows: Sequence[Row]) -> str:
    lines = [f"  {'figure':<70} {'value':>10} {'target':>10}  verdict"]
    for r in rows:
        target = "" if r.target is None else f"{'<=' if r.at_most else '>='} {r.target:g}"
        value = f"{r.value:.2f} {r.unit}".strip()
        note = f"  ({r.note})" if r.note else ""
        lines.append(f"  {r.figure:<70} {value:>10} {target:>10}  {r.verdict()}{note}")
    return "\n".join(lines)


def _step(argv: Sequence[str], timeout: float) -> None:
    """One bench in its own process; its output goes through to ours as it comes. A step that
    fails is reported and the others still run: the table leaves out what it lacks."""
    print(f"\n$ {' '.join(argv)}", flush=True)
    t0 = time.monotonic()
    try:
        subprocess.run([sys.executable, *argv], check=True, timeout=timeout)
    except subprocess.SubprocessError as e:
        print(f"warning: the step failed: {e}", file=sys.stderr, flush=True)
    print(f"  ({time.monotonic() - t0:.0f} s; {load.load_average()})", flush=True)


def _load(path: Path) -> Any:
    """A step's figures; None where the step wrote none (it failed before its first run)."""
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as e:
        print(f"warning: no figures in {path}: {e}", file=sys.stderr, flush=True)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tests.bench.envelope",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods", type=int, default=150_000)
    p.add_argument("--small-nodes", type=int, default=1000, help="the throughput reference size")
    p.add_argument("--burst", type=int, default=1000, help="GPU pods of each throughput burst")
    p.add_argument(
        "--filter-pods", type=int, help="pods placed for /filter, after none (default: --pods)"
    )
    p.add_argument("--filter-runs", type=int, default=300, help="/filter requests a series")
    p.add_argument(
        "--in-flight", type=int, default=4, help="/filter decisions held as binds under way"
    )
    p.add_argument("--settle", type=float, default=30.0, help="seconds scraped before steady")
    p.add_argument("--step-timeout", type=float, default=1800.0, help="seconds per step at most")
    p.add_argument(
        "--dra",
        action="store_true",
        help="also time /filter over a cluster whose cards are DRA ResourceSlices with claims, "
        "and the throughput of pods in DRA mode",
    )
    p.add_argument("--out", help="folder for each step's JSON (default: a temporary one)")
    load.add_arguments(p)
    args = p.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="hami-envelope-"))
    out.mkdir(parents=True, exist_ok=True)
    filter_pods = dict.fromkeys((0, args.pods if args.filter_pods is None else args.filter_pods))
    dra_pods = list(filter_pods)[-1:] if args.dra else []
    print(
        f"envelope bench: {args.nodes} nodes, {args.pods} pods; figures under {out}; "
        f"{os.cpu_count()} cores, {load.load_average()}",
        flush=True,
    )
    steps = [
        (
            ["-m", "tests.bench.memory", "--nodes", str(args.nodes), "--pods", f"0,{args.pods}",
             "--settle", str(args.settle), "--ready-timeout", "600"],
            out / "memory.json",
        ),
        *(
            (
                ["-m", "hami", "bench", "--http", "--nodes", str(args.nodes), "--pods",
                 str(pods), "--runs", str(args.filter_runs), "--memory", "100,20000",
                 "--node-policy", "spread,binpack", "--candidates", "all,share",
                 "--in-flight", str(args.in_flight)],
                out / f"filter-{pods}.json",
            )
            for pods in filter_pods
        ),
        *(
            (
                ["-m", "hami", "bench", "--http", "--dra", "--nodes", str(args.nodes), "--pods",
                 str(pods), "--runs", str(args.filter_runs), "--memory", "100,20000",
                 "--node-policy", "spread,binpack", "--candidates", "all,share",
                 "--in-flight", str(args.in_flight)],
                out / f"filter-dra-{pods}.json",
            )
            for pods in dra_pods
        ),
        *(
            (
                ["-m", "tests.bench.throughput", "--nodes", str(size), "--bursts",
                 str(args.burst), "--backlog", "0", "--ceiling", "0", "--node-policies",
                 "spread,binpack"],
                out / f"throughput-{size}.json",
            )
            for size in dict.fromkeys((args.small_nodes, args.nodes))
        ),
        *(
            [(
                ["-m", "tests.bench.throughput", "--dra-mode", "--nodes", str(args.small_nodes),
                 "--bursts", str(args.burst), "--backlog", "0", "--ceiling", "0",
                 "--node-policies", "spread,binpack"],
                out / f"throughput-dra-{args.small_nodes}.json",
            )] if args.dra else []
        ),
    ]  # fmt: skip
    with load.Hog(args.load, args.load_seconds):
        for step, figures in steps:
            figures.unlink(missing_ok=True)  # a step that fails leaves no figures of an earlier run
            _step([*step, "--json", str(figures)], args.step_timeout)
    memory = _load(out / "memory.json")
    rows = [
        *(memory_rows(memory) if memory else []),
        *(
            row
            for pods in filter_pods
            for row in filter_rows(pods, _load(out / f"filter-{pods}.json") or [])
        ),
        *(
            row
            for pods in dra_pods
            for row in filter_rows(pods, _load(out / f"filter-dra-{pods}.json") or [], dra=True)
        ),
        *throughput_rows(
            args.small_nodes,
            _load(out / f"throughput-{args.small_nodes}.json") or [],
            args.nodes,
            _load(out / f"throughput-{args.nodes}.json") or [],
        ),
        *(
            throughput_rows(
                args.small_nodes,
                _load(out / f"throughput-dra-{args.small_nodes}.json") or [],
                args.nodes,
                [],
                world="DRA mode, ",
            )
            if args.dra
            else []
        ),
    ]
    print(
        f"\nthe envelope, {args.nodes} nodes, {args.pods} pods ({load.load_average()}):\n"
        f"{table(rows)}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
