"""HAMi's per-card and per-container series as Prometheus text, from a snapshot of the cache.

A cluster of 1,000 nodes with 8 cards each is 135,000 lines a scrape. Through
prometheus_client's collector that took 2.4 s of the event loop every scrape, stalling every
filter, bind and review behind it. Here a scrape takes a snapshot on the loop (references to
the cache's immutable records, one list per kind), and the text is written from it on a
worker thread; each card's label text is built once and reused while its card is unchanged.
The output is what prometheus_client writes (labels sorted by name, Go float formatting), so
scrapers and tests see no difference.
"""

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, cast

from prometheus_client import utils

from hami.cache.quota import QuotaLine
from hami.cache.store import ClusterCache
from hami.engine.inventory import PodAllocation
from hami.engine.model import Card, ContainerDevice, MigInstance, NodeState
from hami.engine.outside import OutsideClaim

# Go's float formatting, as prometheus_client writes every sample (the library is untyped).
_go_format = cast(Callable[[float], str], utils.floatToGoString)
_go_seen: dict[float, str] = {}


def _go(value: float) -> str:
    # Most samples repeat a few values (card sizes, common shares): formatted once each.
    text = _go_seen.get(value)
    if text is None:
        if len(_go_seen) > 100_000:
            _go_seen.clear()
        text = _go_seen[value] = _go_format(value)
    return text


MIB = 2**20
ZONE = "vGPU"

# Label names by meaning: (HAMi v2.9+ name, legacy name before v2.9).
LABELS = {
    "node": ("node", "nodeid"),
    "uuid": ("device_uuid", "deviceuuid"),
    "index": ("device_index", "deviceidx"),
    "type": ("device_type", "devicetype"),
    "total_cores": ("device_cores", "devicecores"),
    "total_mem": ("device_memory_limit", "devicememorylimit"),
    "namespace": ("namespace", "podnamespace"),
    "pod_node": ("node", "nodename"),
    "pod": ("pod", "podname"),
    "container": ("container_index", "containeridx"),
    "device": ("device_uuid", "deviceuuid"),
}
CARD = ("node", "uuid", "index", "type")
CONTAINER = ("namespace", "pod_node", "pod", "container", "device")
OUTSIDE_HELP = (
    "Whole cards counted as held by bound GPU pods the scheduler did not place (another "
    "scheduler, or a node named at creation)"
)
OUTSIDE_POD_HELP = "Whole cards a bound GPU pod holds outside the scheduler (the kubelet's count)"
QUOTA_USED_HELP = "GPU memory (MiB) or cores the namespace's pods hold, counted against its quota"


@dataclass(frozen=True)
class Series:
    name: str
    legacy: str
    help: str
    labels: tuple[str, ...]
    legacy_labels: tuple[str, ...]
    value: Callable[[Any], float]


CARD_SERIES = (
    Series(
        "hami_gpu_memory_limit_bytes",
        "GPUDeviceMemoryLimit",
        "Card memory in bytes",
        CARD,
        CARD,
        lambda c: c.info.devmem * MIB,
    ),
    Series(
        "hami_gpu_core_limit_ratio",
        "GPUDeviceCoreLimit",
        "Card cores (percent of SMs)",
        CARD,
        CARD,
        lambda c: c.info.devcore,
    ),
    Series(
        "hami_gpu_memory_allocated_bytes",
        "GPUDeviceMemoryAllocated",
        "Card memory allocated in bytes",
        # HAMi v2.10 labels it with the card's cores (Totalcore), not those allocated.
        ("node", "uuid", "index", "total_cores", "type"),
        ("node", "uuid", "index", "total_cores", "type"),
        lambda c: c.usage.usedmem * MIB,
    ),
    Series(
        "hami_gpu_shared_count",
        "GPUDeviceSharedNum",
        "Tasks sharing the card",
        CARD,
        CARD,
        lambda c: c.usage.used,
    ),
    Series(
        # Not one of HAMi's: the slots a card has, beside hami_gpu_shared_count's slots used.
        "hami_gpu_shared_limit",
        "hami_gpu_shared_limit",
        "Tasks the card may be shared by (the device plugin's split count)",
        CARD,
        CARD,
        lambda c: c.info.count,
    ),
    Series(
        "hami_gpu_core_allocated_ratio",
        "GPUDeviceCoreAllocated",
        "Cores allocated (percent of SMs)",
        CARD,
        CARD,
        lambda c: c.usage.usedcores,
    ),
    Series(
        "hami_node_gpu_memory_allocated_ratio",
        "nodeGPUMemoryPercentage",
        "Allocated share of card memory",
        CARD,
        ("node", "uuid", "index"),
        lambda c: c.usage.usedmem / c.info.devmem if c.info.devmem else 0.0,
    ),
    Series(
        "hami_node_gpu_overview",
        "nodeGPUOverview",
        "Card memory allocated in bytes, card totals as labels",
        ("node", "uuid", "index", "total_cores", "total_mem", "type"),
        ("node", "uuid", "index", "total_cores", "total_mem", "type"),
        lambda c: c.usage.usedmem * MIB,
    ),
)
CONTAINER_SERIES = (
    Series(
        "hami_vgpu_memory_allocated_bytes",
        "vGPUMemoryAllocated",
        "Memory allocated to one container on one card",
        CONTAINER,
        CONTAINER,
        lambda d: d.usedmem * MIB,
    ),
    Series(
        "hami_vgpu_core_allocated_ratio",
        "vGPUCoreAllocated",
        "Cores allocated to one container on one card",
        CONTAINER,
        CONTAINER,
        lambda d: d.usedcores,
    ),
)


def _escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    """`{a="1",b="2",zone="vGPU"}` with the names sorted, as prometheus_client writes them."""
    body = ",".join(f'{n}="{_escape(v)}"' for n, v in sorted([*pairs, ("zone", ZONE)]))
    return "{" + body + "}"


def _chunks(lines: Iterable[str], per_chunk: int = 2000) -> Iterator[bytes]:
    batch: list[str] = []
    for line in lines:
        batch.append(line)
        if len(batch) == per_chunk:
            yield "".join(batch).encode()
            batch.clear()
    if batch:
        yield "".join(batch).encode()


def _header(name: str, help_text: str) -> str:
    return f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one scrape writes, taken on the event loop; every record in it is immutable."""

    nodes: tuple[NodeState, ...]
    pods: tuple[PodAllocation, ...]
    quotas: tuple[QuotaLine, ...]
    outside: tuple[OutsideClaim, ...] = ()


class ClusterExposition:
    """The cluster series under HAMi's v2.9+ names, or `legacy` ones; `per_pod=False` leaves out
    every series that names a namespace or a pod (per container, and the quotas)."""

    def __init__(self, cache: ClusterCache, legacy: bool = False, per_pod: bool = True) -> None:
        self.cache = cache
        self.legacy = legacy
        self.per_pod = per_pod
        # Per card series, its label names (in this exposition's naming) and their meanings.
        self._card_keys = [
            (self._label_names(keys), keys)
            for keys in (s.legacy_labels if legacy else s.labels for s in CARD_SERIES)
        ]
        self._container_names = self._label_names(CONTAINER)
        # (node, card info) -> label text per card series. The cache is bounded by the
        # cluster's cards; it starts over past its bound.
        self._card_labels: dict[tuple[str, object], tuple[str, ...]] = {}
        # (pod uid, node, container index, card) -> label text; bounded likewise.
        self._container_labels: dict[tuple[str, str, int, str], str] = {}

    def snapshot(self) -> Snapshot:
        """Cheap: references only. Call it on the event loop."""
        outside = tuple(self.cache.outside())
        if not self.per_pod:
            return Snapshot(tuple(self.cache.view.values()), (), (), outside)
        return Snapshot(
            tuple(self.cache.view.values()),
            tuple(self.cache.pods()),
            tuple(self.cache.quotas.lines()),
            outside,
        )

    def _name(self, series: Series) -> str:
        return series.legacy if self.legacy else series.name

    def _label_names(self, keys: tuple[str, ...]) -> list[str]:
        return [LABELS[k][1 if self.legacy else 0] for k in keys]

    def _card_label_text(self, node: str, card: Card) -> tuple[str, ...]:
        key = (node, card.info)
        found = self._card_labels.get(key)
        if found is not None:
            return found
        i = card.info
        known = {
            "node": node,
            "uuid": i.id,
            "index": str(i.index),
            "type": i.type,
            "total_cores": str(i.devcore),
            "total_mem": str(i.devmem),
        }
        texts = tuple(
            _labels(zip(names, (known[k] for k in keys), strict=True))
            for names, keys in self._card_keys
        )
        if len(self._card_labels) > 1_000_000:
            self._card_labels.clear()
        self._card_labels[key] = texts
        return texts

    def render(self, snap: Snapshot) -> list[bytes]:
        """The text of every cluster series, in chunks of a few hundred KiB; safe on a worker
        thread. Chunks, because joining and encoding 20 MiB at once are single calls that hold
        the interpreter lock (and so the event loop) for tens of milliseconds."""
        return list(_chunks(self._lines(snap)))

    def _lines(self, snap: Snapshot) -> Iterator[str]:
        cards = [(node.name, card) for node in snap.nodes for card in node.cards]
        labels = [self._card_label_text(node, card) for node, card in cards]
        for index, series in enumerate(CARD_SERIES):
            name = self._name(series)
            yield _header(name, series.help)
            value = series.value
            for (_, card), text in zip(cards, labels, strict=True):
                yield f"{name}{text[index]} {_go(value(card))}\n"
        yield from self._mig_instances(snap.nodes)
        yield from self._outside(snap)
        if self.per_pod:
            yield from self._quotas(snap.quotas)
            yield from self._containers(snap.pods)

    def _outside(self, snap: Snapshot) -> Iterable[str]:
        """Whole cards counted for bound GPU pods this scheduler did not place (another
        scheduler's, or created with their node named): per node, and per pod."""
        cards = {node.name: len(node.cards) for node in snap.nodes}
        # Each pod is counted on at most every card of its node once.
        counted = [(c, min(c.cards, cards.get(c.node, 0))) for c in snap.outside]
        held: dict[str, int] = {}
        for claim, n in counted:
            held[claim.node] = held.get(claim.node, 0) + n
        name = "hami_node_gpu_outside_scheduler_cards"
        yield _header(name, OUTSIDE_HELP)
        for node in snap.nodes:
            yield f"{name}{_labels([('node', node.name)])} {_go(held.get(node.name, 0))}\n"
        if not self.per_pod:
            return
        name = "hami_gpu_pod_outside_scheduler_cards"
        yield _header(name, OUTSIDE_POD_HELP)
        for c, n in counted:
            text = _labels([("namespace", c.namespace), ("node", c.node), ("pod", c.name)])
            yield f"{name}{text} {_go(n)}\n"

    def _mig_instances(self, nodes: tuple[NodeState, ...]) -> Iterable[str]:
        """HAMi's hami_node_gpu_mig_instance_info: 1 per MIG instance its device plugin has
        created (the runtime identity recorded on the pod), with the scheduler's placement."""
        name = "nodeGPUMigInstance" if self.legacy else "hami_node_gpu_mig_instance_info"
        yield _header(name, "MIG instance on a card: its identity and placement")
        for node in nodes:
            for card in node.cards:
                if not card.info.mig:
                    continue
                for i in card.usage.mig:
                    if i.ready:
                        yield f"{name}{self._mig_labels(node.name, card, i)} 1.0\n"

    def _mig_labels(self, node: str, card: Card, i: MigInstance) -> str:
        if self.legacy:
            migname = f"{i.profile}-{i.gpu_instance}"
            return _labels(
                [
                    ("nodeid", node),
                    ("deviceuuid", card.info.id),
                    ("deviceidx", str(card.info.index)),
                    ("migname", migname),
                ]
            )
        return _labels(
            [
                ("node", node),
                ("device_uuid", card.info.id),
                ("device_index", str(card.info.index)),
                ("mig_uuid", i.uuid),
                ("profile", i.profile),
                ("gpu_instance_id", str(i.gpu_instance)),
                ("compute_instance_id", str(i.compute_instance)),
                ("placement_start", str(i.placement.start)),
                ("placement_size", str(i.placement.size)),
            ]
        )

    def _container_label_text(self, pod: PodAllocation, index: int, uuid: str) -> str:
        key = (pod.uid, pod.node, index, uuid)
        found = self._container_labels.get(key)
        if found is None:
            if len(self._container_labels) > 1_000_000:
                self._container_labels.clear()
            known = {
                "namespace": pod.namespace,
                "pod_node": pod.node,
                "pod": pod.name,
                "container": str(index),
                "device": uuid,
            }
            pairs = zip(self._container_names, (known[k] for k in CONTAINER), strict=True)
            found = self._container_labels[key] = _labels(pairs)
        return found

    def _containers(self, pods: tuple[PodAllocation, ...]) -> Iterable[str]:
        # One series per (pod, container, card): a container holding several MIG instances of
        # one card gets their sum, as HAMi's exposition does (two samples with the same labels
        # are not valid, and Prometheus would keep one of them).
        rows: dict[str, ContainerDevice] = {}
        for pod in pods:
            for index, container in enumerate(pod.devices):
                for d in container:
                    text = self._container_label_text(pod, index, d.uuid)
                    seen = rows.get(text)
                    if seen is not None:
                        mem, cores = seen.usedmem + d.usedmem, seen.usedcores + d.usedcores
                        d = replace(d, usedmem=mem, usedcores=cores)
                    rows[text] = d
        for series in CONTAINER_SERIES:
            name = self._name(series)
            yield _header(name, series.help)
            for text, d in rows.items():
                yield f"{name}{text} {_go(series.value(d))}\n"

    def _quotas(self, lines: tuple[QuotaLine, ...]) -> Iterable[str]:
        """HAMi's quota series: per namespace and resource (`quota_name`), what its pods hold
        (memory in MiB) and, where a ResourceQuota sets one, the limit as written."""
        if not self.legacy:
            yield _header("hami_resource_quota_limit", "GPU ResourceQuota limit of the namespace")
            for q in lines:
                if q.limit is not None:
                    text = _labels([("namespace", q.namespace), ("quota_name", q.resource)])
                    yield f"hami_resource_quota_limit{text} {_go(q.limit)}\n"
        name = "QuotaUsed" if self.legacy else "hami_resource_quota_used"
        names = ("quotanamespace", "quotaName") if self.legacy else ("namespace", "quota_name")
        yield _header(name, QUOTA_USED_HELP)
        for q in lines:
            # HAMi writes 0 in the limit label where no ResourceQuota limits the resource.
            text = _labels(
                [(names[0], q.namespace), (names[1], q.resource), ("limit", str(q.limit or 0))]
            )
            yield f"{name}{text} {_go(q.used)}\n"
