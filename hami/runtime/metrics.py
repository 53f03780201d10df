"""Prometheus metrics: HAMi's scheduler series (zone="vGPU") plus our latency histograms.

The per-card and per-container series are computed from the cache at scrape
time, so they can never drift from what the scheduler decides with.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hami.cache.store import ClusterCache
from hami.engine.model import Card, ContainerDevice

MIB = 2**20
ZONE = "vGPU"
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

# Label names by meaning: (HAMi v2.9+ name, legacy name before v2.9).
LABELS = {
    "node": ("node", "nodeid"),
    "uuid": ("device_uuid", "deviceuuid"),
    "index": ("device_index", "deviceidx"),
    "type": ("device_type", "devicetype"),
    "used_cores": ("device_cores", "devicecores"),
    "total_cores": ("device_cores", "devicecores"),
    "total_mem": ("device_memory_limit", "devicememorylimit"),
    "namespace": ("namespace", "podnamespace"),
    "pod_node": ("node", "nodename"),
    "pod": ("pod", "podname"),
    "container": ("container_index", "containeridx"),
    "device": ("device_uuid", "deviceuuid"),
}
CARD = ("node", "uuid", "index", "type")
QUOTA_USED_HELP = "GPU memory (MiB) or cores the namespace's pods hold, counted against its quota"
CONTAINER = ("namespace", "pod_node", "pod", "container", "device")


@dataclass(frozen=True)
class _Series:
    name: str
    legacy: str
    help: str
    labels: tuple[str, ...]
    legacy_labels: tuple[str, ...]
    value: Callable[[Card], float] | Callable[[ContainerDevice], float]


CARD_SERIES = (
    _Series(
        "hami_gpu_memory_limit_bytes",
        "GPUDeviceMemoryLimit",
        "Card memory in bytes",
        CARD,
        CARD,
        lambda c: c.info.devmem * MIB,
    ),
    _Series(
        "hami_gpu_core_limit_ratio",
        "GPUDeviceCoreLimit",
        "Card cores (percent of SMs)",
        CARD,
        CARD,
        lambda c: c.info.devcore,
    ),
    _Series(
        "hami_gpu_memory_allocated_bytes",
        "GPUDeviceMemoryAllocated",
        "Card memory allocated in bytes",
        ("node", "uuid", "index", "used_cores", "type"),
        ("node", "uuid", "index", "used_cores", "type"),
        lambda c: c.usage.usedmem * MIB,
    ),
    _Series(
        "hami_gpu_shared_count",
        "GPUDeviceSharedNum",
        "Tasks sharing the card",
        CARD,
        CARD,
        lambda c: c.usage.used,
    ),
    _Series(
        "hami_gpu_core_allocated_ratio",
        "GPUDeviceCoreAllocated",
        "Cores allocated (percent of SMs)",
        CARD,
        CARD,
        lambda c: c.usage.usedcores,
    ),
    _Series(
        "hami_node_gpu_memory_allocated_ratio",
        "nodeGPUMemoryPercentage",
        "Allocated share of card memory",
        CARD,
        ("node", "uuid", "index"),
        lambda c: c.usage.usedmem / c.info.devmem if c.info.devmem else 0.0,
    ),
    _Series(
        "hami_node_gpu_overview",
        "nodeGPUOverview",
        "Card memory allocated in bytes, card totals as labels",
        ("node", "uuid", "index", "total_cores", "total_mem", "type"),
        ("node", "uuid", "index", "total_cores", "total_mem", "type"),
        lambda c: c.usage.usedmem * MIB,
    ),
)
CONTAINER_SERIES = (
    _Series(
        "hami_vgpu_memory_allocated_bytes",
        "vGPUMemoryAllocated",
        "Memory allocated to one container on one card",
        CONTAINER,
        CONTAINER,
        lambda d: d.usedmem * MIB,
    ),
    _Series(
        "hami_vgpu_core_allocated_ratio",
        "vGPUCoreAllocated",
        "Cores allocated to one container on one card",
        CONTAINER,
        CONTAINER,
        lambda d: d.usedcores,
    ),
)


class ClusterCollector(Collector):
    """HAMi's per-card and per-container series; `legacy` gives the names used before v2.9.

    The per-container series name every GPU pod (namespace and pod labels); `per_pod=False`
    leaves them out for clusters where whoever scrapes must not learn what runs where.
    """

    def __init__(self, cache: ClusterCache, legacy: bool = False, per_pod: bool = True) -> None:
        self.cache = cache
        self.legacy = legacy
        self.per_pod = per_pod

    def _family(self, series: _Series) -> tuple[GaugeMetricFamily, tuple[str, ...]]:
        """The empty family under this collector's names, and its label meanings in order."""
        keys = series.legacy_labels if self.legacy else series.labels
        names = [LABELS[k][1 if self.legacy else 0] for k in keys]
        family = GaugeMetricFamily(
            series.legacy if self.legacy else series.name, series.help, labels=[*names, "zone"]
        )
        return family, keys

    def collect(self) -> Iterable[Metric]:
        for series in CARD_SERIES:
            family, keys = self._family(series)
            value = cast(Callable[[Card], float], series.value)
            for node in self.cache.view.values():
                for c in node.cards:
                    i = c.info
                    known = {
                        "node": node.name,
                        "uuid": i.id,
                        "index": str(i.index),
                        "type": i.type,
                        "used_cores": str(c.usage.usedcores),
                        "total_cores": str(i.devcore),
                        "total_mem": str(i.devmem),
                    }
                    family.add_metric([*(known[k] for k in keys), ZONE], value(c))
            yield family
        if not self.per_pod:
            return
        # The quota series name namespaces, so they go with the per-container ones.
        yield from self._quotas()
        for series in CONTAINER_SERIES:
            family, keys = self._family(series)
            dvalue = cast(Callable[[ContainerDevice], float], series.value)
            for pod in self.cache.pods():
                for index, container in enumerate(pod.devices):
                    for d in container:
                        known = {
                            "namespace": pod.namespace,
                            "pod_node": pod.node,
                            "pod": pod.name,
                            "container": str(index),
                            "device": d.uuid,
                        }
                        family.add_metric([*(known[k] for k in keys), ZONE], dvalue(d))
            yield family

    def _quotas(self) -> Iterable[Metric]:
        """HAMi's quota series: per namespace and resource (`quota_name`), what its pods hold
        (memory in MiB) and, where a ResourceQuota sets one, the limit as written."""
        lines = list(self.cache.quotas.lines())
        if self.legacy:
            used = GaugeMetricFamily(
                "QuotaUsed",
                QUOTA_USED_HELP,
                labels=["quotanamespace", "quotaName", "limit", "zone"],
            )
        else:
            used = GaugeMetricFamily(
                "hami_resource_quota_used",
                QUOTA_USED_HELP,
                labels=["namespace", "quota_name", "limit", "zone"],
            )
            limit = GaugeMetricFamily(
                "hami_resource_quota_limit",
                "GPU ResourceQuota limit of the namespace",
                labels=["namespace", "quota_name", "zone"],
            )
            for q in lines:
                if q.limit is not None:
                    limit.add_metric([q.namespace, q.resource, ZONE], q.limit)
            yield limit
        for q in lines:
            # HAMi writes 0 in the limit label where no ResourceQuota limits the resource.
            used.add_metric([q.namespace, q.resource, str(q.limit or 0), ZONE], q.used)
        yield used


class Metrics:
    def __init__(
        self,
        cache: ClusterCache,
        staleness: Callable[[], float],
        events_dropped: Callable[[], int],
        legacy_names: bool = False,
        per_pod: bool = True,
    ) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(ClusterCollector(cache, legacy_names, per_pod))
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
            "Seconds since the last list or watch event of any informer",
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
        dropped = Gauge(
            "hami_events_dropped",
            "Kubernetes Events dropped since start because the queue was full",
            registry=r,
        )
        dropped.set_function(lambda: float(events_dropped()))

    def preemption_observer(self) -> Callable[[str, str], None]:
        return lambda outcome, reason: self.preemptions.labels(outcome, reason).inc()

    @staticmethod
    def observer(histogram: Histogram) -> Callable[[str, float], None]:
        """(result, seconds) -> None for the adapters, which know nothing of Prometheus."""
        return lambda result, seconds: histogram.labels(result).observe(seconds)
