"""Family quotas end to end in the process: the cache counts what a namespace's pods hold of
each family's memory and cores (filter's reservations and bound pods, released on delete),
the ResourceQuota informer's limits are read per family, and the webhook refuses a pod that
would take its namespace past them with HAMi's words."""

from typing import Any

from hami.cache.store import ClusterCache
from hami.engine.admission import AdmissionConfig
from hami.engine.families.hygon import HYGON
from hami.engine.families.registry import from_device_config
from hami.engine.policy import Defaults
from hami.engine.quota import QuotaUsage
from hami.engine.requests import ResourceDefaults
from hami.service.admission import AdmissionService
from hami.service.annotations import allocation_annotations
from hami.service.explain import quota_lines
from hami.service.placement import Placement
from tests.builders import FAMILIES, family_node, family_pod, sample_card

QUOTA = {
    "metadata": {"uid": "q", "namespace": "ns", "name": "dcu"},
    "spec": {"hard": {"limits.hygon.com/dcumem": "3000", "limits.hygon.com/dcucores": "300"}},
}


def cluster() -> tuple[ClusterCache, Placement]:
    cache = ClusterCache(
        clock=lambda: 0.0, reservation_ttl=1e9, families=FAMILIES, resources=ResourceDefaults()
    )
    cards = [sample_card(HYGON, i, uuid=f"n-DCU-{i}") for i in range(2)]
    cache.replace_nodes([family_node("n", HYGON, cards)])
    cache.quotas.replace([QUOTA])
    return cache, Placement(cache, Defaults(), ResourceDefaults())


def review(mem: int) -> dict[str, Any]:
    pod = family_pod("p", HYGON, mem=mem)
    pod["spec"]["schedulerName"] = "hami-scheduler"
    return {
        "uid": "u",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "namespace": "ns",
        "operation": "CREATE",
        "object": pod,
    }


def test_a_namespaces_dcu_memory_is_counted_and_released() -> None:
    cache, placement = cluster()
    pod = family_pod("p", HYGON, mem=2000)
    d = placement.filter(pod, ["n"]).decision
    assert d is not None and d.node == "n" and d.devices is not None
    quota = cache.quotas.family_quota("ns")
    assert quota is not None
    assert quota.used["hygon.com/dcumem"] == 2000
    assert cache.quotas.used("ns") == QuotaUsage()  # NVIDIA's quota does not count DCUs
    pod["metadata"]["annotations"].update(
        allocation_annotations(d.node, d.devices, 0, families=FAMILIES)
    )
    pod["spec"]["nodeName"] = d.node
    cache.upsert_pod(pod)
    assert cache.quotas.family_quota("ns") == quota  # the bind's annotation: the same pod
    cache.delete_pod(pod)
    after = cache.quotas.family_quota("ns")
    assert after is not None and after.used == {}


def test_the_webhook_refuses_a_pod_past_its_namespaces_dcu_quota() -> None:
    # A DCU ask without cores takes 100 (HAMi's default), counted here as HAMi counts it.
    cache, placement = cluster()
    held = family_pod("held", HYGON, mem=2000)
    assert placement.filter(held, ["n"]).decision is not None
    service = AdmissionService(
        AdmissionConfig(families=FAMILIES), cache.quotas.quota, cache.quotas.family_quota
    )
    assert service.review(review(1000)).allowed
    refused = service.review(review(1001))
    assert (refused.allowed, refused.message, refused.code) == (
        False,
        "exceeding resource quota",
        403,
    )


def test_limits_come_and_go_with_the_quota_objects() -> None:
    cache, _ = cluster()
    lines = [(q.resource, q.limit) for q in cache.quotas.lines()]
    assert ("hygon.com/dcumem", 3000) in lines and ("hygon.com/dcucores", 300) in lines
    cache.quotas.delete(QUOTA)
    assert cache.quotas.family_quota("ns") is None
    cache.quotas.replace([QUOTA])
    assert cache.quotas.family_quota("ns") is not None
    cache.quotas.replace([])
    assert cache.quotas.family_quota("ns") is None


def test_explain_prints_a_namespaces_family_quota() -> None:
    cache, placement = cluster()
    assert placement.filter(family_pod("held", HYGON, mem=2000), ["n"]).decision is not None
    (line,) = quota_lines(cache.quotas, "ns")
    assert "hygon.com/dcumem 2000 of 3000" in line, line


def test_with_a_device_config_renaming_dcus_the_quota_is_on_the_new_names() -> None:
    """A device config renaming Hygon's resources: the cache counts, the quota informer reads
    and the webhook checks the new names, and a quota on the old ones (QUOTA) limits nothing."""
    families = from_device_config(
        {
            "hygon": {
                "resourceCountName": "example.com/dcu",
                "resourceMemoryName": "example.com/dcu-mem",
                "resourceCoreName": "example.com/dcu-cores",
            }
        }
    )
    dcu = families.by_type()["DCU"]
    cache = ClusterCache(
        clock=lambda: 0.0, reservation_ttl=1e9, families=families, resources=ResourceDefaults()
    )
    cache.replace_nodes([family_node("n", dcu, [sample_card(dcu, i) for i in range(2)])])
    renamed = {
        "metadata": {"uid": "r", "namespace": "ns", "name": "dcu-renamed"},
        "spec": {
            "hard": {"limits.example.com/dcu-mem": "3000", "limits.example.com/dcu-cores": "300"}
        },
    }
    cache.quotas.replace([QUOTA, renamed])
    assert (
        Placement(cache, Defaults(), ResourceDefaults())
        .filter(family_pod("held", dcu, mem=2000), ["n"])
        .decision
        is not None
    )
    quota = cache.quotas.family_quota("ns")
    assert quota is not None
    assert (quota.limits, quota.used) == (
        {"example.com/dcu-mem": 3000, "example.com/dcu-cores": 300},
        {"example.com/dcu-mem": 2000, "example.com/dcu-cores": 100},
    )
    service = AdmissionService(
        AdmissionConfig(families=families), cache.quotas.quota, cache.quotas.family_quota
    )

    def asking(mem: int) -> dict[str, Any]:
        pod = family_pod("p", dcu, mem=mem)
        pod["spec"]["schedulerName"] = "hami-scheduler"
        return {**review(mem), "object": pod}

    assert service.review(asking(1000)).allowed
    assert service.review(asking(1001)).message == "exceeding resource quota"
