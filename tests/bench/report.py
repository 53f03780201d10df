"""What the load benches report of a run beside its speed: whether scheduling kept going.

Per run: binds that failed (per pod bound), the binds whose outcome was unknown and how each
ended (`hami_bind_unknown_outcomes_total{ended}`, where this build exports it; else 0 and a note
that the metric is absent), those counted as `hami_bind_failures_total{reason="unknown-outcome"}`,
and whether a refusal was permanent: pods still Pending at the end while `/readyz` fails (the
scheduler blind, refusing every /filter and /bind until a restart). Figures are printed and
written before any cleanup, and a failed cleanup is a warning: a loaded API server's 504 on a
delete of 2,000 pods must not cost the run's figures.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tests.bench.pods import warn
from tests.bench.scrape import Sample, sample
from tests.e2e import invariant
from tests.e2e.cluster import ControlPlane, ControlPlaneError

T = TypeVar("T")
UNKNOWN_REASON = "unknown-outcome"


@dataclass(frozen=True)
class Liveness:
    pending: int  # pods not bound at the end of the run
    readyz: str  # what /readyz answered then: "200", "503", or why it could not be read
    unknown: dict[str, int] | None  # unknown outcomes by how they ended; None: metric absent
    unknown_failures: int  # hami_bind_failures_total{reason="unknown-outcome"}

    @property
    def permanent(self) -> bool:
        """Pods left Pending by a scheduler that stopped scheduling, not by a slow one."""
        return self.pending > 0 and self.readyz != "200"

    def figures(self) -> dict[str, Any]:
        return {
            "pending_at_end": self.pending,
            "readyz_at_end": self.readyz,
            "unknown_outcomes": sum((self.unknown or {}).values()),
            "unknown_outcomes_by_end": self.unknown,
            "unknown_outcome_metric_present": self.unknown is not None,
            "unknown_outcome_bind_failures": self.unknown_failures,
            "permanent_refusal": self.permanent,
        }

    def line(self) -> str:
        if self.unknown is None:
            unknown = "0 (hami_bind_unknown_outcomes_total absent from /metrics)"
        else:
            ended = ", ".join(f"{k} {v}" for k, v in sorted(self.unknown.items()))
            unknown = f"{sum(self.unknown.values())}" + (f" ({ended})" if ended else "")
        if self.pending == 0:
            verdict = "none (every pod bound)"
        elif self.permanent:
            verdict = f"PERMANENT: {self.pending} pods Pending, /readyz {self.readyz}"
        else:
            verdict = f"none, but {self.pending} pods Pending at the deadline with /readyz 200"
        return (
            f"  unknown bind outcomes: {unknown}; bind failures for an unknown outcome "
            f"{self.unknown_failures}; permanent refusal: {verdict}"
        )


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
    liveness: Liveness | None = None
    load: str = ""  # the machine's load average at the run's end
    run_seconds: float = 0.0  # the whole run: creates, binds, the final check

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
            "load": self.load,
            "run_seconds": self.run_seconds,
            **(self.liveness.figures() if self.liveness else {}),
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
            f"our RSS {self.rss_mib:.0f} MiB; the run took {self.run_seconds:.1f}s; {self.load}",
        ]
        if self.liveness:
            lines.append(self.liveness.line())
        return "\n".join(lines)


def liveness(plane: ControlPlane, delta: Sample, pending: int) -> Liveness:
    return Liveness(
        pending=pending,
        readyz=readyz(plane),
        unknown=None if delta.unknown_outcomes is None else dict(delta.unknown_outcomes),
        unknown_failures=delta.bind_failures.get(UNKNOWN_REASON, 0),
    )


def final_check(plane: ControlPlane, namespaces: Sequence[str], missing: int) -> list[str]:
    """What a fresh LIST says after the run, once the device plugin's lock releases settled;
    `missing`: the pods of the run not bound."""
    problems = [f"{missing} pods not bound"] if missing else []
    try:
        for namespace in namespaces:
            problems += invariant.misplaced(plane.kube, namespace)[:10]
        problems += invariant.overcommitted(plane.kube)[:10]
        settle = time.monotonic() + 30
        while (locks := invariant.locks_left(plane.kube)) and time.monotonic() < settle:
            time.sleep(1)
    except (AssertionError, OSError, ValueError, subprocess.SubprocessError) as e:
        # kubectl refused or timed out on a loaded machine: the check is lost, not the run.
        return [*problems, f"final check not done: {type(e).__name__}: {e}"]
    problems += [f"node lock left on {node}: {value}" for node, value in locks.items()]
    return problems


def readyz(plane: ControlPlane) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{plane.extender_url}/readyz", timeout=30) as response:
            return str(response.status)
    except urllib.error.HTTPError as e:
        return str(e.code)
    except OSError as e:
        return f"unread ({e})"


def retried(what: str, action: Callable[[], T], attempts: int = 3) -> T:
    """A read of the plane's metrics, tried again on a loaded machine's timeout."""
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except OSError as e:
            if attempt == attempts:
                raise
            warn(f"{what} (attempt {attempt} of {attempts})", e)
    raise AssertionError("unreachable")


def read_sample(plane: ControlPlane, *, cpu_first: bool = True) -> Sample:
    return retried(
        "reading the metrics",
        lambda: sample(plane, plane.metrics_url, plane.scheduler_port, cpu_first=cpu_first),
    )


def write_json(path: str | None, figures: Sequence[dict[str, Any]]) -> None:
    """After each run, so what was measured is kept whatever happens next."""
    if path:
        Path(path).write_text(json.dumps(list(figures), indent=2, default=str) + "\n")


def stop_quietly(plane: ControlPlane) -> None:
    """Stop the control plane; what went wrong stopping it is a warning, not a lost run."""
    try:
        plane.close()
    except (ControlPlaneError, OSError) as e:
        warn("stopping the control plane", e)
    print("control plane stopped", file=sys.stderr, flush=True)
