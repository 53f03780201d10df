"""The cluster series: what prometheus_client would write, without holding the event loop."""

import asyncio
import gzip
import subprocess
from typing import cast

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from hami.bench.cluster import build_cluster, build_filled_cluster
from hami.cache.store import ClusterCache
from hami.engine.model import ContainerDevices, Usage
from hami.engine.names import PHASE_SUCCESS
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.runtime import cardblocks
from hami.runtime.app import Runtime
from hami.runtime.apps import metrics_app
from hami.runtime.drametrics import OVER_HELP, SOURCE_HELP
from hami.runtime.drametrics import SERIES as DRA_SERIES
from hami.runtime.exposition import (
    CARD_SERIES,
    CONTAINER,
    CONTAINER_SERIES,
    LABELS,
    OUTSIDE_HELP,
    OUTSIDE_POD_HELP,
)
from hami.runtime.metrics import Metrics
from hami.runtime.promtext import ZONE, go_float
from hami.service.annotations import allocation_annotations
from hami.service.placement import Placement
from tests.builders import FAMILIES, family_pod, sample_node
from tests.e2e.cluster import built_tool
from tests.unit import mig_cluster as mc
from tests.unit.runtime.scrapes import mig_cluster, outside_pod


class Reference(Collector):
    """The cluster series through prometheus_client's own families: the format to match."""

    def __init__(self, cache: ClusterCache, legacy: bool) -> None:
        self.cache, self.legacy = cache, legacy

    def _family(self, name: str, legacy: str, help_text: str, keys: tuple[str, ...]) -> Metric:
        names = [LABELS[k][1 if self.legacy else 0] for k in keys]
        return GaugeMetricFamily(
            legacy if self.legacy else name, help_text, labels=[*names, "zone"]
        )

    def collect(self) -> list[Metric]:
        out: list[Metric] = []
        for s in CARD_SERIES:
            keys = s.legacy_labels if self.legacy else s.labels
            family = cast(GaugeMetricFamily, self._family(s.name, s.legacy, s.help, keys))
            for node in self.cache.view.values():
                for c in node.cards:
                    known = {
                        "node": node.name,
                        "uuid": c.info.id,
                        "index": str(c.info.index),
                        "type": c.info.type,
                        "total_cores": str(c.info.devcore),
                        "total_mem": str(c.info.devmem),
                    }
                    family.add_metric([*(known[k] for k in keys), ZONE], s.value(c))
            out.append(family)
        out.append(self._mig())
        out.extend(self._outside())
        out.extend(self._dra())
        for s in CONTAINER_SERIES:
            family = cast(GaugeMetricFamily, self._family(s.name, s.legacy, s.help, CONTAINER))
            # One sample per (pod, container, card), the sum of what the container holds there.
            summed: dict[tuple[str, ...], float] = {}
            for pod in self.cache.pods():
                for index, container in enumerate(pod.all_devices()):
                    for d in container:
                        values = (pod.namespace, pod.node, pod.name, str(index), d.uuid)
                        summed[values] = summed.get(values, 0) + s.value(d)
            for labels, value in summed.items():
                family.add_metric([*labels, ZONE], value)
            out.append(family)
        return out

    def _dra(self) -> list[Metric]:
        """Which world each card is in; what DRA claims consume of the cards drivers publish."""
        info = GaugeMetricFamily(
            "hami_gpu_source_info",
            SOURCE_HELP,
            labels=["device_type", "device_uuid", "node", "source", "zone"],
        )
        over = GaugeMetricFamily(
            "hami_gpu_overcommitted", OVER_HELP, labels=["device_uuid", "node", "zone"]
        )
        published = {(d.node, d.uuid): d for d in self.cache.dra.devices()}
        for node in self.cache.view.values():
            for c in node.all_cards():
                both = (node.name, c.info.id) in published
                source = "both" if both else "device-plugin"
                info.add_metric([c.info.type, c.info.id, node.name, source, ZONE], 1)
                if both:
                    past = c.usage.usedmem > c.info.devmem or c.usage.usedcores > c.info.devcore
                    over.add_metric([c.info.id, node.name, ZONE], int(past))
                published.pop((node.name, c.info.id), None)
        for d in published.values():
            info.add_metric([d.product, d.uuid, d.node, "dra", ZONE], 1)
        out: list[Metric] = [info, over]
        usage = self.cache.dra.usage()
        for index, (name, help_text) in enumerate(DRA_SERIES):
            family = GaugeMetricFamily(name, help_text, labels=["device_uuid", "node", "zone"])
            for d in self.cache.dra.devices():
                u = usage.get(d.node, {}).get(d.uuid, Usage())
                value = (d.memory * 2**20, u.usedmem * 2**20, u.usedcores, u.used)[index]
                family.add_metric([d.uuid, d.node, ZONE], value)
            out.append(family)
        return out

    def _outside(self) -> list[Metric]:
        """Whole cards of bound GPU pods the scheduler did not place, per node and per pod."""
        per_node = GaugeMetricFamily(
            "hami_node_gpu_outside_scheduler_cards", OUTSIDE_HELP, labels=["node", "zone"]
        )
        per_pod = GaugeMetricFamily(
            "hami_gpu_pod_outside_scheduler_cards",
            OUTSIDE_POD_HELP,
            labels=["namespace", "node", "pod", "zone"],
        )
        for node in self.cache.view.values():
            claims = list(self.cache.outside(node.name))
            counted = [min(c.cards, len(node.cards)) for c in claims]
            per_node.add_metric([node.name, ZONE], sum(counted))
            for c, n in zip(claims, counted, strict=True):
                per_pod.add_metric([c.namespace, c.node, c.name, ZONE], n)
        return [per_node, per_pod]

    def _mig(self) -> Metric:
        """HAMi's MIG series: one sample per instance its device plugin has created."""
        new = ["node", "device_uuid", "device_index", "mig_uuid", "profile", "gpu_instance_id"]
        new += ["compute_instance_id", "placement_start", "placement_size"]
        old = ["nodeid", "deviceuuid", "deviceidx", "migname"]
        family = GaugeMetricFamily(
            "nodeGPUMigInstance" if self.legacy else "hami_node_gpu_mig_instance_info",
            "MIG instance on a card: its identity and placement",
            labels=[*(old if self.legacy else new), "zone"],
        )
        for node in self.cache.view.values():
            for c in node.cards:
                for i in c.usage.mig if c.info.mode == "mig" else ():
                    if not i.uuid:
                        continue
                    card = [node.name, c.info.id, str(c.info.index)]
                    if self.legacy:
                        values = [*card, f"{i.profile}-{i.gpu_instance}"]
                    else:
                        p = i.placement
                        values = [*card, i.uuid, i.profile, str(i.gpu_instance)]
                        values += [str(i.compute_instance), str(p.start), str(p.size)]
                    family.add_metric([*values, ZONE], 1)
        return family


@pytest.mark.parametrize("legacy", [False, True])
def test_mig_instances_are_written_as_prometheus_client_writes_them(legacy: bool) -> None:
    cache = mig_cluster()
    registry = CollectorRegistry()
    registry.register(Reference(cache, legacy))
    cluster = Metrics(cache, lambda: 0.0, lambda: 0, legacy).cluster
    written = b"".join(cluster.render(cluster.snapshot())).decode()
    kept = [line for line in written.splitlines() if "quota" not in line.lower()]
    assert kept == generate_latest(registry).decode().splitlines()
    mig = [
        line
        for line in written.splitlines()
        if line.startswith(("hami_node_gpu_mig", "nodeGPUMig"))
    ]
    assert len(mig) == 2
    if not legacy:
        assert (
            'hami_node_gpu_mig_instance_info{compute_instance_id="0",device_index="0",'
            'device_uuid="GPU-9c1b4c4e-7a4b-2b4d-b2a4-0b0e5b9f3a11",gpu_instance_id="2",'
            'mig_uuid="MIG-a",node="a100",placement_size="4",placement_start="4",'
            'profile="3g.20gb",zone="vGPU"} 1.0'
        ) in mig


def every_shape() -> ClusterCache:
    """Every allocation shape: two MIG instances of one card in one container, a container on
    two cards, an init container and an app container on one card."""
    t4 = mc.node("t4", mc.card("GPU-t0", 0, "hami-core"), mc.card("GPU-t1", 1, "hami-core"))
    c = mc.Cluster(mc.node(), t4)
    for obj in (
        mc.pod("two-instances", mc.gpu(4000, nums=2), mode="mig"),
        mc.pod("two-cards", mc.gpu(1000, nums=2), mode="hami-core"),
        mc.pod("init", mc.gpu(2000), init=(mc.gpu(3000),), mode="hami-core"),
    ):
        _, why = c.place(obj)
        assert why == "", why
    return c.cache


def unique_samples(text: str) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """The exposition's samples that share their name and labels with an earlier one."""
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    twice = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            if key in seen:
                twice.append(key)
            seen.add(key)
    return twice


@pytest.mark.parametrize("legacy", [False, True])
def test_one_series_per_container_and_card_holding_the_sum(legacy: bool) -> None:
    cache = every_shape()
    (held,) = [p for p in cache.pods() if p.name == "two-instances"]
    assert [d.uuid for d in held.devices[0]] == [mc.GPU, mc.GPU]  # two 1g.5gb of one card
    cluster = Metrics(cache, lambda: 0.0, lambda: 0, legacy).cluster
    written = b"".join(cluster.render(cluster.snapshot())).decode()
    assert unique_samples(written) == []
    name = "vGPUMemoryAllocated" if legacy else "hami_vgpu_memory_allocated_bytes"
    lines = [x for x in written.splitlines() if x.startswith(name) and "two-instances" in x]
    assert len(lines) == 1 and lines[0].endswith(f" {go_float(2 * 4864 * 2**20)}"), lines


def every_family() -> tuple[ClusterCache, dict[str, ContainerDevices]]:
    """A node of each family but NVIDIA, as its device plugin registers it, and a pod on each,
    placed by /filter and bound with what /bind writes; each family's devices, by type."""
    cache = ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([sample_node(f"node-{f.wire.type}", f) for f in FAMILIES.others])
    placed = {}
    for family in FAMILIES.others:
        kind = family.wire.type
        obj = family_pod(f"pod-{kind}", family)
        decision = (
            Placement(cache, Defaults(), ResourceDefaults()).filter(obj, [f"node-{kind}"]).decision
        )
        assert decision is not None and decision.node and decision.devices, (kind, decision)
        written = allocation_annotations(
            decision.node,
            decision.devices,
            0,
            PHASE_SUCCESS,
            containers=tuple(obj["spec"]["containers"]),
            cards=cache.family_cards(decision.node),
            families=FAMILIES,
        )
        obj["metadata"]["annotations"].update(written)
        obj["spec"]["nodeName"], obj["status"]["phase"] = decision.node, "Running"
        cache.upsert_pod(obj)
        (placed[kind],) = decision.devices
    return cache, placed


@pytest.mark.parametrize("legacy", [False, True])
def test_every_family_has_its_per_container_series(legacy: bool) -> None:
    """The per-container series come from the allocation the cache counts, every family's: one
    sample per card each family's pod holds, its memory and cores as the bind wrote them."""
    cache, placed = every_family()
    cluster = Metrics(cache, lambda: 0.0, lambda: 0, legacy).cluster
    written = b"".join(cluster.render(cluster.snapshot())).decode()
    assert unique_samples(written) == []
    memory, cores = (s.legacy if legacy else s.name for s in CONTAINER_SERIES)
    pod, card = ("podname", "deviceuuid") if legacy else ("pod", "device_uuid")
    samples = {
        (s.name, s.labels[pod], s.labels[card]): s.value
        for f in text_string_to_metric_families(written)
        for s in f.samples
        if s.name in (memory, cores)
    }
    for kind, devices in placed.items():
        for d in devices:
            assert samples[(memory, f"pod-{kind}", d.uuid)] == d.usedmem * 2**20, kind
            assert samples[(cores, f"pod-{kind}", d.uuid)] == d.usedcores, kind


@pytest.mark.e2e  # promtool is one of the binaries the e2e tier builds
@pytest.mark.parametrize("placed", ["every_shape", "every_family"])
def test_promtool_finds_the_exposition_valid(placed: str) -> None:
    """Prometheus' own check of the exposition: NVIDIA's every allocation shape; every other
    family placed (promtool as tests/e2e/k8sbins/build.sh builds it; skipped, saying why,
    where there is none)."""
    cache = every_shape() if placed == "every_shape" else every_family()[0]
    metrics = Metrics(cache, lambda: 0.0, lambda: 0)
    text = b"".join(metrics.render(metrics.snapshot()))
    promtool = built_tool("promtool", "HAMI_PROMTOOL")
    result = subprocess.run(
        [str(promtool), "check", "metrics"], input=text, capture_output=True, timeout=120
    )
    problems = set((result.stdout + result.stderr).decode().splitlines())
    # The one lint HAMi's own names give (kept for its dashboards); anything else, a repeated
    # series ("metric not unique") above all, is ours.
    hamis = 'hami_gpu_shared_count non-histogram and non-summary metrics should not have "_count" suffix'
    assert problems <= {hamis} and result.returncode in (0, 3), problems


@pytest.mark.parametrize("legacy", [False, True])
def test_cluster_series_are_written_as_prometheus_client_writes_them(legacy: bool) -> None:
    cache = build_cluster(nodes=30, cards=4, pods=90, seed=3)
    # Two pods another scheduler bound, on the first node: three of its cards, as the kubelet
    # gives them, and at most all of them.
    first = sorted(cache.view)[0]
    for name, gpus in (("other-a", 3), ("other-b", 9)):
        cache.upsert_pod(outside_pod(name, first, gpus))
    registry = CollectorRegistry()
    registry.register(Reference(cache, legacy))
    expected = generate_latest(registry).decode()
    cluster = Metrics(cache, lambda: 0.0, lambda: 0, legacy).cluster
    written = b"".join(cluster.render(cluster.snapshot())).decode()
    # Quota series come between the card and container series; no quota here, so only their
    # headers differ from the reference.
    kept = [line for line in written.splitlines() if "quota" not in line.lower()]
    assert kept == expected.splitlines()
    assert sum(1 for _ in text_string_to_metric_families(written)) == 21 - legacy
    assert f'hami_node_gpu_outside_scheduler_cards{{node="{first}",zone="vGPU"}} 7.0' in written
    assert (
        f'hami_gpu_pod_outside_scheduler_cards{{namespace="ns",node="{first}",pod="other-b",'
        'zone="vGPU"} 4.0'
    ) in written


async def test_a_scrape_of_a_large_cluster_is_served_whole() -> None:
    """100 nodes x 8 cards, 90 % full, written in chunks off the event loop and sent whole.
    How long a scrape of ten times that holds the loop is a figure of
    `python -m tests.bench.stalls`, not a bound here."""
    metrics = Metrics(build_filled_cluster(100, 8, seed=7), lambda: 0.0, lambda: 0)
    runtime = cast(Runtime, type("Rt", (), {"metrics": metrics})())
    client = TestClient(TestServer(metrics_app(runtime)))
    await client.start_server()
    try:
        async with client.get("/metrics") as r:
            assert r.status == 200
            text = (await r.read()).decode()
    finally:
        await client.close()
    assert len(text) > 2**20
    assert text.endswith("\n") and text.count("\n") > 13_500


def test_a_gzip_scrape_is_the_text_and_recompresses_only_the_nodes_that_changed() -> None:
    cache = build_cluster(nodes=40, cards=4, pods=90, seed=5)
    metrics = Metrics(cache, lambda: 0.0, lambda: 0)
    cluster = metrics.cluster
    plain = b"".join(cluster.render(cluster.snapshot())).decode()
    first = cluster.render(cluster.snapshot(), gzip=True)
    assert gzip.decompress(b"".join(first)).decode() == plain
    again = cluster.render(cluster.snapshot(), gzip=True)
    kept = {id(m) for m in first}
    # Compressed again: each card series' header, and the series after them (one chunk here).
    assert sum(id(m) not in kept for m in again) == len(CARD_SERIES) + 1
    node = sorted(cache.view)[0]
    cache.upsert_pod(outside_pod("other", node, 1))
    changed = cluster.render(cluster.snapshot(), gzip=True)
    assert (
        gzip.decompress(b"".join(changed)).decode()
        == b"".join(cluster.render(cluster.snapshot())).decode()
    )
    # One node changed: besides those, its group's member of each card series.
    assert sum(id(m) not in kept for m in changed) == 2 * len(CARD_SERIES) + 1


def test_per_pod_series_are_left_out_past_the_pod_limit_and_the_quotas_kept() -> None:
    cache = build_cluster(nodes=10, cards=4, pods=30, seed=5)
    pods = len(list(cache.pods()))
    for limit, written in ((pods, True), (pods - 1, False)):
        cluster = Metrics(cache, lambda: 0.0, lambda: 0, pod_limit=limit).cluster
        text = b"".join(cluster.render(cluster.snapshot())).decode()
        assert ("hami_vgpu_memory_allocated_bytes{" in text) is written
        assert "hami_resource_quota_used" in text
        assert "hami_gpu_memory_allocated_bytes{" in text


def test_warm_builds_what_the_first_gzip_scrape_would_and_keeps_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """hami serve warms once at start: the first scrape then compresses only what later
    scrapes do (the series of our own, and the few written whole each time), not every
    card's block."""
    compressed = [0]
    real = cardblocks.gzip_member

    def counting(data: bytes) -> bytes:
        compressed[0] += 1
        return real(data)

    monkeypatch.setattr(cardblocks, "gzip_member", counting)

    def first_and_second(warm: bool) -> tuple[int, int, bytes]:
        metrics = Metrics(build_cluster(50, 4, 100, 7), lambda: 0.0, lambda: 0)
        if warm:
            asyncio.run(metrics.warm())
        counts = []
        for _ in range(2):
            compressed[0] = 0
            answer = metrics.render(metrics.snapshot(), gzip=True)
            counts.append(compressed[0])
        # The cluster's series (our own, first, carry the process's readings).
        return counts[0], counts[1], gzip.decompress(b"".join(answer[1:]))

    cold_first, steady, cold_text = first_and_second(warm=False)
    warm_first, _, warm_text = first_and_second(warm=True)
    assert cold_first > steady
    assert warm_first == steady
    assert warm_text == cold_text
