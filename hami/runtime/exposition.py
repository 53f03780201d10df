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
from typing import Any

from hami.cache.quota import QuotaLine
from hami.cache.store import ClusterCache
from hami.engine.inventory import PodAllocation
from hami.engine.model import Card, ContainerDevice, MigInstance, NodeState
from hami.engine.outside import OutsideClaim
from hami.runtime.cardblocks import CardBlocks, gzip_member
from hami.runtime.drametrics import NO_DRA, DraSnapshot, dra_lines, dra_snapshot
from hami.runtime.promtext import chunks, go_float, header, label_text

MIB = 2**20

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


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one scrape writes, taken on the event loop; every record in it is immutable."""

    nodes: tuple[NodeState, ...]
    pods: tuple[PodAllocation, ...]
    quotas: tuple[QuotaLine, ...]
    outside: tuple[OutsideClaim, ...] = ()
    pod_series: bool = True  # the per-container and per-pod series are written
    dra: DraSnapshot = NO_DRA


class ClusterExposition:
    """The cluster series under HAMi's v2.9+ names, or `legacy` ones; `per_pod=False` leaves out
    every series that names a namespace or a pod (per container, and the quotas), and so does a
    `pod_limit` > 0 for the per-container and per-pod series while more pods hold GPUs."""

    def __init__(
        self, cache: ClusterCache, legacy: bool = False, per_pod: bool = True, pod_limit: int = 0
    ) -> None:
        self.cache = cache
        self.legacy = legacy
        self.per_pod = per_pod
        self.pod_limit = pod_limit
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
        self._blocks = CardBlocks(len(CARD_SERIES), self._node_lines)

    def snapshot(self) -> Snapshot:
        """Cheap: references only. Call it on the event loop."""
        nodes, outside = tuple(self.cache.view.values()), tuple(self.cache.outside())
        dra = dra_snapshot(self.cache)
        if not self.per_pod:
            return Snapshot(nodes, (), (), outside, pod_series=False, dra=dra)
        pods = tuple(self.cache.pods())
        many = 0 < self.pod_limit < len(pods) + len(outside)
        return Snapshot(
            nodes,
            () if many else pods,
            tuple(self.cache.quotas.lines()),
            outside,
            pod_series=not many,
            dra=dra,
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
        # Most card series carry the same labels: one text each, shared (at 5,000 nodes the
        # texts kept are tens of MB). A series' label names follow from its keys.
        made: dict[tuple[str, ...], str] = {}
        for names, keys in self._card_keys:
            if keys not in made:
                made[keys] = label_text(zip(names, (known[k] for k in keys), strict=True))
        texts = tuple(made[keys] for _, keys in self._card_keys)
        if len(self._card_labels) > 1_000_000:
            self._card_labels.clear()
        self._card_labels[key] = texts
        return texts

    def render(self, snap: Snapshot, gzip: bool = False) -> list[bytes]:
        """The text of every cluster series, in chunks of a few hundred KiB, or as gzip members
        (hami.runtime.cardblocks); safe on a worker thread, one render at a time. Chunks,
        because joining and encoding 20 MiB at once are single calls that hold the interpreter
        lock (and so the event loop) for tens of milliseconds."""
        if not gzip:
            return list(chunks(self._lines(snap)))
        out = []
        for series, members in zip(CARD_SERIES, self._blocks.zipped(snap.nodes), strict=True):
            out.append(gzip_member(header(self._name(series), series.help).encode()))
            out.extend(members)
        out.extend(gzip_member(chunk) for chunk in chunks(self._rest(snap)))
        return out

    def _node_lines(self, node: NodeState) -> list[str]:
        """The node's samples of each card series, in the order of CARD_SERIES."""
        cards = node.all_cards()
        labels = [self._card_label_text(node.name, card) for card in cards]
        return [
            "".join(
                f"{name}{text[index]} {go_float(series.value(card))}\n"
                for card, text in zip(cards, labels, strict=True)
            )
            for index, series in enumerate(CARD_SERIES)
            for name in (self._name(series),)
        ]

    def _lines(self, snap: Snapshot) -> Iterator[str]:
        # Every family's cards, told apart by their device_type (the model the plugin registers).
        cards = [(node.name, card) for node in snap.nodes for card in node.all_cards()]
        labels = [self._card_label_text(node, card) for node, card in cards]
        for index, series in enumerate(CARD_SERIES):
            name = self._name(series)
            yield header(name, series.help)
            value = series.value
            for (_, card), text in zip(cards, labels, strict=True):
                yield f"{name}{text[index]} {go_float(value(card))}\n"
        yield from self._rest(snap)

    def _rest(self, snap: Snapshot) -> Iterator[str]:
        """Every series but the per-card ones."""
        yield from self._mig_instances(snap.nodes)
        yield from self._outside(snap)
        yield from dra_lines(snap.nodes, snap.dra)
        if self.per_pod:
            yield from self._quotas(snap.quotas)
        if snap.pod_series:
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
        yield header(name, OUTSIDE_HELP)
        for node in snap.nodes:
            yield f"{name}{label_text([('node', node.name)])} {go_float(held.get(node.name, 0))}\n"
        if not snap.pod_series:
            return
        name = "hami_gpu_pod_outside_scheduler_cards"
        yield header(name, OUTSIDE_POD_HELP)
        for c, n in counted:
            text = label_text([("namespace", c.namespace), ("node", c.node), ("pod", c.name)])
            yield f"{name}{text} {go_float(n)}\n"

    def _mig_instances(self, nodes: tuple[NodeState, ...]) -> Iterable[str]:
        """HAMi's hami_node_gpu_mig_instance_info: 1 per MIG instance its device plugin has
        created (the runtime identity recorded on the pod), with the scheduler's placement."""
        name = "nodeGPUMigInstance" if self.legacy else "hami_node_gpu_mig_instance_info"
        yield header(name, "MIG instance on a card: its identity and placement")
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
            return label_text(
                [
                    ("nodeid", node),
                    ("deviceuuid", card.info.id),
                    ("deviceidx", str(card.info.index)),
                    ("migname", migname),
                ]
            )
        return label_text(
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
            found = self._container_labels[key] = label_text(pairs)
        return found

    def _containers(self, pods: tuple[PodAllocation, ...]) -> Iterable[str]:
        # One series per (pod, container, card) of every family, from the allocation the cache
        # counts (NVIDIA's and the other families' per container, as HAMi lists each device
        # type's): a container holding several MIG instances of one card gets their sum, as
        # HAMi's exposition does (two samples with the same labels are not valid, and
        # Prometheus would keep one of them).
        rows: dict[str, ContainerDevice] = {}
        for pod in pods:
            for index, container in enumerate(pod.all_devices()):
                for d in container:
                    text = self._container_label_text(pod, index, d.uuid)
                    seen = rows.get(text)
                    if seen is not None:
                        mem, cores = seen.usedmem + d.usedmem, seen.usedcores + d.usedcores
                        d = replace(d, usedmem=mem, usedcores=cores)
                    rows[text] = d
        for series in CONTAINER_SERIES:
            name = self._name(series)
            yield header(name, series.help)
            for text, d in rows.items():
                yield f"{name}{text} {go_float(series.value(d))}\n"

    def _quotas(self, lines: tuple[QuotaLine, ...]) -> Iterable[str]:
        """HAMi's quota series: per namespace and resource (`quota_name`), what its pods hold
        (memory in MiB) and, where a ResourceQuota sets one, the limit as written."""
        if not self.legacy:
            yield header("hami_resource_quota_limit", "GPU ResourceQuota limit of the namespace")
            for q in lines:
                if q.limit is not None:
                    text = label_text([("namespace", q.namespace), ("quota_name", q.resource)])
                    yield f"hami_resource_quota_limit{text} {go_float(q.limit)}\n"
        name = "QuotaUsed" if self.legacy else "hami_resource_quota_used"
        names = ("quotanamespace", "quotaName") if self.legacy else ("namespace", "quota_name")
        yield header(name, QUOTA_USED_HELP)
        for q in lines:
            # HAMi writes 0 in the limit label where no ResourceQuota limits the resource.
            text = label_text(
                [(names[0], q.namespace), (names[1], q.resource), ("limit", str(q.limit or 0))]
            )
            yield f"{name}{text} {go_float(q.used)}\n"
