"""Prometheus metrics: HAMi's scheduler series (zone="vGPU") plus our latency histograms.

The per-card and per-container series are computed from the cache at scrape
time, so they can never drift from what the scheduler decides with.
"""

import asyncio
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hami.cache.store import ClusterCache
from hami.kube.calls import WriteObserver
from hami.kube.limiter import WriteLimiter
from hami.runtime.cardblocks import gzip_member
from hami.runtime.exposition import ClusterExposition, Snapshot
from hami.service.binderrors import BindFailure
from hami.service.outcomes import Ended

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# Every reason a bind failure is counted under (hami.service.binderrors, hami.service.binding)
# and every outcome of a preemption plan (hami.service.preemption.preempter): each series is exported at 0
# from the start, so a healthy cluster's dashboard shows 0, not "No data", and rate() has a
# starting point.
BIND_FAILURE_REASONS = tuple(BindFailure)
PREEMPTION_OUTCOMES = (
    ("attempted", ""),
    ("done", ""),
    ("refused", "disruption-budget"),
    ("refused", "error"),
)


@dataclass(frozen=True)
class Probes:
    """Readings of the running process, taken at scrape time: what the alert rules and the
    dashboard's health panels need (helm/hami/monitoring/)."""

    ready: Callable[[], bool]  # the cache has synced and is in touch: /readyz answers ok
    leader: Callable[[], bool]  # this replica answers /filter and /bind
    requeues: Callable[[], int]  # pods asked to retry so far
    unschedulable: Callable[[], tuple[int, float]]  # (GPU pods turned away, oldest seconds)
    certificate_expiry: Callable[[], float]  # the serving certificate's notAfter, Unix seconds
    blind: Callable[[], bool]  # synced, but out of touch: filter and bind refuse
    watch_lag: Callable[[], float]  # seconds a landed Binding has waited for the pods watch
    blind_for: Callable[[], float]  # seconds blind without a break (0 when not blind)
    unknown_outcomes: Callable[[], int]  # binds whose pods are being read back


class _ProbeCollector(Collector):
    def __init__(self, probes: Probes) -> None:
        self.probes = probes

    def collect(self) -> Iterator[Metric]:
        p = self.probes
        pods, oldest = p.unschedulable()
        yield from (
            GaugeMetricFamily(
                "hami_ready", "1 when the cache has synced and is in touch (/readyz)", p.ready()
            ),
            GaugeMetricFamily(
                "hami_cache_blind",
                "1 while a watch is out of touch past its bound: filter and bind refuse",
                p.blind(),
            ),
            GaugeMetricFamily(
                "hami_cache_watch_lag_seconds",
                "Seconds the longest-waiting pod this replica bound has waited for the pods "
                "watch to show it",
                p.watch_lag(),
            ),
            GaugeMetricFamily(
                "hami_cache_blind_seconds",
                "Seconds this replica has been blind without a break (0 when it sees); past "
                "--blind-give-up-seconds /healthz fails and the replica restarts",
                p.blind_for(),
            ),
            GaugeMetricFamily(
                "hami_bind_outcomes_unknown",
                "Binds whose Binding may have landed, their pods being read back now (their "
                "cards stay counted meanwhile)",
                p.unknown_outcomes(),
            ),
            GaugeMetricFamily(
                "hami_leader", "1 on the replica that answers /filter and /bind", p.leader()
            ),
            CounterMetricFamily(
                "hami_requeues",
                "Pods asked to retry (hami.io/requeue) after capacity freed up",
                p.requeues(),
            ),
            GaugeMetricFamily(
                "hami_gpu_pods_unschedulable",
                "GPU pods this replica's filter found no card for, not placed since",
                pods,
            ),
            GaugeMetricFamily(
                "hami_gpu_pods_unschedulable_oldest_seconds",
                "Seconds since the longest-waiting of those pods was first turned away",
                oldest,
            ),
            GaugeMetricFamily(
                "hami_certificate_expiry_timestamp_seconds",
                "When the serving certificate (webhook, --metrics-tls) expires, Unix seconds",
                p.certificate_expiry(),
            ),
        )


class Metrics:
    def __init__(
        self,
        cache: ClusterCache,
        staleness: Callable[[], float],
        events_dropped: Callable[[], int],
        legacy_names: bool = False,
        per_pod: bool = True,
        writes: WriteLimiter | None = None,
        pod_limit: int = 0,
    ) -> None:
        self.cluster = ClusterExposition(cache, legacy_names, per_pod, pod_limit)
        # render runs on worker threads: the scrape handler's and warm's at start.
        self._rendering = threading.Lock()
        self.registry = CollectorRegistry()
        r = self.registry
        self.filter_seconds = Histogram(
            "hami_filter_duration_seconds",
            "Time to answer /filter",
            ["result"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.bind_seconds = Histogram(
            "hami_bind_duration_seconds",
            "Time to answer /bind",
            ["result"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.admission_seconds = Histogram(
            "hami_admission_duration_seconds",
            "Time to answer /webhook",
            ["result"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.loop_lag = Histogram(
            "hami_event_loop_lag_seconds",
            "How late the event loop runs a timer",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.staleness = Gauge(
            "hami_cache_staleness_seconds",
            "Seconds since the stalest informer last heard from the API server (a list, a "
            "watch accepted, an event or a bookmark)",
            registry=r,
        )
        self.staleness.set_function(staleness)
        self.reservations_expired = Counter(
            "hami_reservations_expired_total",
            "Filter decisions never followed by a bind",
            registry=r,
        )
        self.preemptions = Counter(
            "hami_preemptions_total",
            "GPU preemption plans (--preemption) by outcome: attempted, done (every victim "
            "evicted) or refused (reason: disruption-budget or error)",
            ["outcome", "reason"],
            registry=r,
        )
        for outcome, why in PREEMPTION_OUTCOMES:
            self.preemptions.labels(outcome, why)
        dropped = Gauge(
            "hami_events_dropped",
            "Kubernetes Events dropped since start because the queue was full",
            registry=r,
        )
        dropped.set_function(lambda: float(events_dropped()))
        self.bind_failures = Counter(
            "hami_bind_failures_total",
            f"Binds that failed, by reason: {', '.join(BIND_FAILURE_REASONS)}",
            ["reason"],
            registry=r,
        )
        for reason in BIND_FAILURE_REASONS:
            self.bind_failures.labels(reason)
        self.unknown_outcomes = Counter(
            "hami_bind_unknown_outcomes_total",
            f"Binds whose outcome was unknown, by how it ended: {', '.join(Ended)}",
            ["ended"],
            registry=r,
        )
        for ended in Ended:
            self.unknown_outcomes.labels(ended)
        self.forced_relists = Counter(
            "hami_cache_forced_relists_total",
            "Pod lists started because the pods watch lagged past --watch-lag-limit-seconds "
            "without the API server asking for one",
            registry=r,
        )
        self.api_writes = Counter(
            "hami_api_writes_total",
            "Writes this process sent to the API server, by verb, resource and outcome (the "
            "HTTP status, or unanswered)",
            ["verb", "resource", "code"],
            registry=r,
        )
        self.api_write_seconds = Histogram(
            "hami_api_write_duration_seconds",
            "Time from sending a write to its answer, not counting the wait for a slot",
            ["verb", "resource"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        if writes is not None:
            limit = writes
            in_flight = Gauge(
                "hami_api_writes_in_flight",
                "Writes sent and not yet answered (at most --api-write-limit)",
                registry=r,
            )
            in_flight.set_function(lambda: float(limit.in_flight))
            queued = Gauge(
                "hami_api_writes_queued",
                "Writes waiting for a slot under --api-write-limit",
                registry=r,
            )
            queued.set_function(lambda: float(limit.queued))

    def add_probes(self, probes: Probes) -> None:
        """The process readings, once the runtime they read exists."""
        self.registry.register(_ProbeCollector(probes))

    def snapshot(self) -> Snapshot:
        """What the next scrape shows of the cluster; cheap, taken on the event loop."""
        return self.cluster.snapshot()

    async def warm(self) -> None:
        """Render once as Prometheus asks (gzip), on a worker thread, and drop the answer:
        what it builds for every card is kept, so the first scrape costs what later ones do."""
        await asyncio.to_thread(self.render, self.snapshot(), True)

    def render(self, snap: Snapshot, gzip: bool = False) -> list[bytes]:
        """The whole scrape in chunks, or gzip members: our own series, then the cluster's;
        safe on a worker thread, one render at a time."""
        with self._rendering:
            ours = generate_latest(self.registry)
            return [gzip_member(ours) if gzip else ours, *self.cluster.render(snap, gzip)]

    def write_observer(self) -> WriteObserver:
        def observe(verb: str, resource: str, code: str, seconds: float) -> None:
            self.api_writes.labels(verb, resource, code).inc()
            self.api_write_seconds.labels(verb, resource).observe(seconds)

        return observe

    def preemption_observer(self) -> Callable[[str, str], None]:
        return lambda outcome, reason: self.preemptions.labels(outcome, reason).inc()

    @staticmethod
    def observer(histogram: Histogram) -> Callable[[str, float], None]:
        """(result, seconds) -> None for the adapters, which know nothing of Prometheus."""
        return lambda result, seconds: histogram.labels(result).observe(seconds)
