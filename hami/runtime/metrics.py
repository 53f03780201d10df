"""Prometheus metrics: HAMi's scheduler series (zone="vGPU") plus our latency histograms.

The per-card and per-container series are computed from the cache at scrape
time, so they can never drift from what the scheduler decides with.
"""

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hami.cache.store import ClusterCache

MIB = 2**20
ZONE = {"zone": "vGPU"}
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class ClusterCollector(Collector):
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache

    def collect(self) -> Iterable[Metric]:
        card = ["node", "device_uuid", "device_index", "device_type"]
        families = {
            "limit": GaugeMetricFamily(
                "hami_gpu_memory_limit_bytes", "Card memory in bytes", labels=[*card, "zone"]
            ),
            "core_limit": GaugeMetricFamily(
                "hami_gpu_core_limit_ratio", "Card cores (percent)", labels=[*card, "zone"]
            ),
            "mem": GaugeMetricFamily(
                "hami_gpu_memory_allocated_bytes",
                "Card memory allocated in bytes",
                labels=[
                    "node",
                    "device_uuid",
                    "device_index",
                    "device_cores",
                    "device_type",
                    "zone",
                ],
            ),
            "shared": GaugeMetricFamily(
                "hami_gpu_shared_count", "Tasks sharing the card", labels=[*card, "zone"]
            ),
            "cores": GaugeMetricFamily(
                "hami_gpu_core_allocated_ratio", "Cores allocated (percent)", labels=[*card, "zone"]
            ),
            "ratio": GaugeMetricFamily(
                "hami_node_gpu_memory_allocated_ratio",
                "Allocated share of card memory",
                labels=[*card, "zone"],
            ),
            "overview": GaugeMetricFamily(
                "hami_node_gpu_overview",
                "Card memory allocated in bytes, with card totals as labels",
                labels=[
                    "node",
                    "device_uuid",
                    "device_index",
                    "device_cores",
                    "device_memory_limit",
                    "device_type",
                    "zone",
                ],
            ),
        }
        for node in self.cache.view.values():
            for c in node.cards:
                i, u = c.info, c.usage
                base = [node.name, i.id, str(i.index), i.type, "vGPU"]
                families["limit"].add_metric(base, i.devmem * MIB)
                families["core_limit"].add_metric(base, i.devcore)
                families["mem"].add_metric(
                    [node.name, i.id, str(i.index), str(u.usedcores), i.type, "vGPU"],
                    u.usedmem * MIB,
                )
                families["shared"].add_metric(base, u.used)
                families["cores"].add_metric(base, u.usedcores)
                families["ratio"].add_metric(base, u.usedmem / i.devmem if i.devmem else 0.0)
                families["overview"].add_metric(
                    [node.name, i.id, str(i.index), str(i.devcore), str(i.devmem), i.type, "vGPU"],
                    u.usedmem * MIB,
                )
        vmem = GaugeMetricFamily(
            "hami_vgpu_memory_allocated_bytes",
            "Memory allocated to one container on one card",
            labels=["namespace", "node", "pod", "container_index", "device_uuid", "zone"],
        )
        vcore = GaugeMetricFamily(
            "hami_vgpu_core_allocated_ratio",
            "Cores allocated to one container on one card",
            labels=["namespace", "node", "pod", "container_index", "device_uuid", "zone"],
        )
        for pod in self.cache.pods():
            for index, container in enumerate(pod.devices):
                for d in container:
                    labels = [pod.namespace, pod.node, pod.name, str(index), d.uuid, "vGPU"]
                    vmem.add_metric(labels, d.usedmem * MIB)
                    vcore.add_metric(labels, d.usedcores)
        yield from families.values()
        yield vmem
        yield vcore


class Metrics:
    def __init__(
        self, cache: ClusterCache, staleness: Callable[[], float], events_dropped: Callable[[], int]
    ) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(ClusterCollector(cache))
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
        dropped = Gauge(
            "hami_events_dropped",
            "Kubernetes Events dropped since start because the queue was full",
            registry=r,
        )
        dropped.set_function(lambda: float(events_dropped()))

    @staticmethod
    def observer(histogram: Histogram) -> Callable[[str, float], None]:
        """(result, seconds) -> None for the adapters, which know nothing of Prometheus."""
        return lambda result, seconds: histogram.labels(result).observe(seconds)
