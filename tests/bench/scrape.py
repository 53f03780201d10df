"""What the throughput bench reads between runs: counters and histograms of our process, of
kube-scheduler and of kube-apiserver, and the CPU time of every process on the machine."""

from __future__ import annotations

import os
import ssl
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.cluster import ControlPlane

Buckets = dict[float, float]  # histogram upper bound -> cumulative count
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY"})
# Binds whose outcome was unknown, by how each ended (the family's name without "_total", as the
# parser names a counter's family).
UNKNOWN_OUTCOMES = "hami_bind_unknown_outcomes"

OURS: dict[str, tuple[str, dict[str, str]]] = {
    "filter": ("hami_filter_duration_seconds", {}),
    "bind": ("hami_bind_duration_seconds", {}),
    "webhook": ("hami_admission_duration_seconds", {}),
    "loop_lag": ("hami_event_loop_lag_seconds", {}),
    "lock write": ("hami_api_write_duration_seconds", {"resource": "nodes"}),
    "Binding": ("hami_api_write_duration_seconds", {"resource": "pods/binding"}),
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


@dataclass
class Sample:
    """One reading of everything the bench compares before and after a run."""

    filters: float = 0.0
    bind_failures: Counter[str] = field(default_factory=Counter)  # by reason
    our_writes: Counter[str] = field(default_factory=Counter)  # "verb resource" -> count
    all_writes: Counter[str] = field(default_factory=Counter)  # every client, from kube-apiserver
    webhook_errors: float = 0.0  # creates refused because calling our webhook failed
    # hami_bind_unknown_outcomes_total by how each ended; None where we do not export it
    unknown_outcomes: Counter[str] | None = None
    histograms: dict[str, Buckets] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)  # component -> CPU seconds

    def minus(self, before: Sample) -> Sample:
        return Sample(
            filters=self.filters - before.filters,
            bind_failures=self.bind_failures - before.bind_failures,
            our_writes=self.our_writes - before.our_writes,
            all_writes=self.all_writes - before.all_writes,
            webhook_errors=self.webhook_errors - before.webhook_errors,
            unknown_outcomes=(
                None
                if self.unknown_outcomes is None
                else self.unknown_outcomes - (before.unknown_outcomes or Counter())
            ),
            histograms=self.histograms,
            cpu={k: v - before.cpu.get(k, 0.0) for k, v in self.cpu.items()},
        )


def fetch(url: str, context: ssl.SSLContext | None = None) -> str:
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    with opener.open(url, timeout=30) as response:
        return str(response.read().decode())


def _insecure() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # kube-scheduler's self-signed serving certificate
    return context


def _admin(plane: ControlPlane) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(plane.pki / "ca.crt"))
    context.load_cert_chain(plane.pki / "admin.crt", plane.pki / "admin.key")
    return context


def histograms(
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
    """The bucket bound under which a fraction q of the observations between two reads fell."""
    delta = sorted((le, n - before.get(le, 0.0)) for le, n in after.items())
    total = delta[-1][1] if delta else 0.0
    return next((le for le, n in delta if total and n >= q * total), float("nan"))


def sample(
    plane: ControlPlane, ours_url: str, scheduler_port: int, *, cpu_first: bool = True
) -> Sample:
    """Everything at once. Our /metrics is read once: at 5,000 nodes it is tens of MB of text,
    and writing it costs us up to seconds of CPU. So the CPU is read before it (`cpu_first`,
    the end of a run) or after it (its start): the bench's own scrapes are not a run's cost."""
    cpu = cpu_seconds(plane) if cpu_first else {}
    ours = list(text_string_to_metric_families(fetch(ours_url)))
    out = counted(ours)
    out.cpu = cpu or cpu_seconds(plane)
    scheduler = list(
        text_string_to_metric_families(
            fetch(f"https://127.0.0.1:{scheduler_port}/metrics", _insecure())
        )
    )
    out.histograms = histograms(ours, OURS) | histograms(scheduler, KUBE_SCHEDULER)
    for family in text_string_to_metric_families(
        fetch(f"{plane.apiserver_url}/metrics", _admin(plane))
    ):
        for s in family.samples:
            if s.name == "apiserver_request_total" and s.labels.get("verb") in WRITE_VERBS:
                sub = s.labels.get("subresource") or ""
                resource = s.labels.get("resource", "") + (f"/{sub}" if sub else "")
                out.all_writes[f"{s.labels['verb'].lower()} {resource}"] += int(s.value)
            elif (
                s.name.startswith("apiserver_admission_webhook_rejection_count")
                and s.labels.get("error_type") == "calling_webhook_error"
            ):
                out.webhook_errors += s.value
    return out


def counted(ours: list[Metric]) -> Sample:
    """Our counters: filters, bind failures by reason, unknown bind outcomes by how they ended
    (None where this build does not export them), our API writes."""
    out = Sample()
    for family in ours:
        if family.name == UNKNOWN_OUTCOMES:
            out.unknown_outcomes = Counter()
        for s in family.samples:
            if s.name == "hami_filter_duration_seconds_count":
                out.filters += s.value
            elif s.name == "hami_bind_failures_total":
                out.bind_failures[s.labels["reason"]] += int(s.value)
            elif s.name == f"{UNKNOWN_OUTCOMES}_total" and out.unknown_outcomes is not None:
                out.unknown_outcomes[s.labels.get("ended", "")] += int(s.value)
            elif s.name == "hami_api_writes_total":
                out.our_writes[f"{s.labels['verb']} {s.labels['resource']}"] += int(s.value)
    return out


def cpu_seconds(plane: ControlPlane) -> dict[str, float]:
    """CPU time (user + system) of each live component, by name without its start counter, and
    of this bench process itself (it creates the pods and watches them, as a controller would)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}

    def read(pid: int) -> float | None:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            return None
        return (int(fields[11]) + int(fields[12])) / tick

    for process in plane.processes():
        seconds = read(process.popen.pid)
        if seconds is not None:
            name = process.name.split(".")[0]
            out[name] = out.get(name, 0.0) + seconds
    out["bench client"] = read(os.getpid()) or 0.0
    return out


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    rss = next(row for row in status.splitlines() if row.startswith("VmRSS:"))
    return int(rss.split()[1]) / 1024
