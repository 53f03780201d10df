"""HAMi's scheduler series from the cache, under the v2.9+ names and the legacy ones."""

from hami.cache.store import ClusterCache
from hami.engine.codec import encode_node_devices
from hami.engine.model import ContainerDevice, DeviceInfo
from hami.engine.quota import QuotaUsage
from hami.engine.requests import ResourceDefaults
from hami.runtime.metrics import BIND_FAILURE_REASONS, PREEMPTION_OUTCOMES, Metrics, Probes
from hami.service.annotations import allocation_annotations
from hami.service.binderrors import BindError, BindFailure
from tests.builders import FAMILIES


def metrics(legacy: bool, per_pod: bool = True) -> str:
    return scrape(metrics_of_one_pod(legacy, per_pod))


def metrics_of_one_pod(legacy: bool = False, per_pod: bool = True) -> Metrics:
    """One T4 node, one pod holding 1000 MiB and 30 cores of it, one quota."""
    cache = ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    devs = (DeviceInfo("GPU-a", 0, 10, 15360, 100, "NVIDIA-Tesla T4"),)
    cache.replace_nodes([
        {"metadata": {"name": "n", "annotations": {"hami.io/node-nvidia-register": encode_node_devices(devs)}},
         "status": {"allocatable": {"nvidia.com/gpu": "10"}}},
    ])  # fmt: skip
    cache.upsert_pod({
        "metadata": {"uid": "u", "namespace": "ns", "name": "p",
                     "annotations": allocation_annotations(
                         "n", ((ContainerDevice("GPU-a", 1000, 30),),), 0, families=FAMILIES)},
        "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {"limits": {
            "nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 30}}}]},
        "status": {"phase": "Running"},
    })  # fmt: skip
    cache.quotas.replace([{"metadata": {"uid": "q", "namespace": "ns", "name": "gpu"},
                           "spec": {"hard": {"limits.nvidia.com/gpumem": "8000"}}}])  # fmt: skip
    return Metrics(cache, lambda: 0.0, lambda: 0, legacy, per_pod)


def scrape(m: Metrics) -> str:
    return b"".join(m.render(m.snapshot())).decode()


def test_current_names() -> None:
    text = metrics(legacy=False)
    # HAMi v2.10 puts the card's cores in device_cores, not those allocated (30 here).
    assert (
        'hami_gpu_memory_allocated_bytes{device_cores="100",device_index="0",device_type="NVIDIA-Tesla T4",'
        'device_uuid="GPU-a",node="n",zone="vGPU"} 1.048576e+09'
    ) in text
    assert (
        'hami_gpu_shared_count{device_index="0",device_type="NVIDIA-Tesla T4",'
        'device_uuid="GPU-a",node="n",zone="vGPU"} 1.0' in text
    )
    assert (
        'hami_vgpu_memory_allocated_bytes{container_index="0",device_uuid="GPU-a",namespace="ns",node="n",'
        'pod="p",zone="vGPU"} 1.048576e+09'
    ) in text
    assert "GPUDeviceSharedNum" not in text


def test_legacy_names() -> None:
    text = metrics(legacy=True)
    assert (
        'GPUDeviceSharedNum{deviceidx="0",devicetype="NVIDIA-Tesla T4",deviceuuid="GPU-a",nodeid="n",zone="vGPU"} 1.0'
        in text
    )
    assert (
        'nodeGPUMemoryPercentage{deviceidx="0",deviceuuid="GPU-a",nodeid="n",zone="vGPU"} 0.065104'
        in text
    )
    assert (
        'vGPUCoreAllocated{containeridx="0",deviceuuid="GPU-a",nodename="n",podname="p",'
        'podnamespace="ns",zone="vGPU"} 30.0' in text
    )
    assert "hami_gpu_shared_count" not in text
    assert "hami_filter_duration_seconds" in text  # our histograms keep their names


def test_per_pod_series_can_be_left_out() -> None:
    """Whoever scrapes then learns the cards' usage, not which pod runs where."""
    text = metrics(legacy=False, per_pod=False)
    assert "hami_gpu_memory_allocated_bytes{" in text
    assert 'pod="p"' not in text and 'namespace="ns"' not in text
    assert 'pod="p"' in metrics(legacy=False)


def test_quota_series_per_namespace_and_resource() -> None:
    cache = ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    cache.quotas.replace(
        [
            {
                "metadata": {"uid": "q", "namespace": "ns", "name": "gpu"},
                "spec": {"hard": {"limits.nvidia.com/gpumem": "8000"}},
            }
        ]
    )
    cache.quotas.add("ns", QuotaUsage(1000, 30))
    text = scrape(Metrics(cache, lambda: 0.0, lambda: 0))
    assert (
        'hami_resource_quota_limit{namespace="ns",quota_name="nvidia.com/gpumem",zone="vGPU"} 8000.0'
        in text
    )
    assert 'quota_name="nvidia.com/gpucores"' not in text.split("hami_resource_quota_used")[0]
    assert (
        'hami_resource_quota_used{limit="8000",namespace="ns",quota_name="nvidia.com/gpumem",'
        'zone="vGPU"} 1000.0' in text
    )
    assert (
        'hami_resource_quota_used{limit="0",namespace="ns",quota_name="nvidia.com/gpucores",'
        'zone="vGPU"} 30.0' in text
    )
    legacy = scrape(Metrics(cache, lambda: 0.0, lambda: 0, True))
    assert (
        'QuotaUsed{limit="8000",quotaName="nvidia.com/gpumem",quotanamespace="ns",zone="vGPU"} 1000.0'
        in legacy
    )
    assert "hami_resource_quota" not in legacy


def test_process_probes_are_read_at_scrape_time() -> None:
    state = {"leader": False, "requeues": 0}
    m = Metrics(
        ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults()),
        lambda: 0.0,
        lambda: 0,
    )
    m.add_probes(
        Probes(
            ready=lambda: True,
            leader=lambda: bool(state["leader"]),
            requeues=lambda: int(state["requeues"]),
            unschedulable=lambda: (3, 42.5),
            certificate_expiry=lambda: 1.8e9,
            blind=lambda: bool(state["leader"]),
            watch_lag=lambda: 2.5,
            blind_for=lambda: 0.0,
            unknown_outcomes=lambda: 0,
        )
    )
    text = scrape(m)
    for line in (
        "hami_ready 1.0",
        "hami_leader 0.0",
        "hami_requeues_total 0.0",
        "# TYPE hami_requeues_total counter",
        "hami_gpu_pods_unschedulable 3.0",
        "hami_gpu_pods_unschedulable_oldest_seconds 42.5",
        "hami_certificate_expiry_timestamp_seconds 1.8e+09",
        "hami_cache_blind 0.0",
        "hami_cache_watch_lag_seconds 2.5",
    ):
        assert line in text.splitlines(), line
    state.update(leader=True, requeues=7)
    text = scrape(m)
    assert "hami_leader 1.0" in text.splitlines()
    assert "hami_cache_blind 1.0" in text.splitlines()
    assert "hami_requeues_total 7.0" in text.splitlines()


def test_split_slots_of_each_card() -> None:
    for legacy in (False, True):
        node = 'nodeid="n"' if legacy else 'node="n"'
        assert "hami_gpu_shared_limit{" in metrics(legacy)
        line = next(
            x for x in metrics(legacy).splitlines() if x.startswith("hami_gpu_shared_limit{")
        )
        assert node in line and line.endswith(" 10.0"), line


def test_counters_start_at_zero_for_every_reason_and_outcome() -> None:
    """A healthy cluster's dashboard shows 0 bind failures and preemptions, not "No data"."""
    text = metrics(legacy=False)
    for reason in BIND_FAILURE_REASONS:
        assert f'hami_bind_failures_total{{reason="{reason}"}} 0.0' in text, reason
    for outcome, why in PREEMPTION_OUTCOMES:
        assert f'hami_preemptions_total{{outcome="{outcome}",reason="{why}"}} 0.0' in text


def test_every_reason_a_bind_fails_with_is_one_exported_at_zero() -> None:
    """BindError carries a BindFailure, and each is exported (tests/unit/test_vocabularies.py
    ties the help, the docs and the dashboard to the same enum)."""
    assert tuple(BindFailure) == BIND_FAILURE_REASONS
    assert BindError("x").reason in BIND_FAILURE_REASONS  # BindError's default
