"""Namespace quotas in the cache: ResourceQuota objects, usage kept with the allocations,
and the filter service that never lets a namespace past its quota."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.cache.quota import QuotaBook, QuotaLine
from hami.cache.store import ClusterCache
from hami.engine.codec import encode_node_devices
from hami.engine.model import DeviceInfo
from hami.engine.policy import Defaults
from hami.engine.quota import QuotaLimits, QuotaUsage, allocation_usage
from hami.engine.requests import ResourceDefaults
from hami.service.annotations import allocation_annotations
from hami.service.placement import Placement
from tests.builders import FAMILIES
from tests.unit.engine.test_properties import container, manifest


def rq(uid: str, namespace: str, **hard: str) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "namespace": namespace, "name": uid},
        "spec": {"hard": {f"limits.nvidia.com/{k}": v for k, v in hard.items()}},
    }


def test_book_follows_resourcequota_objects_and_reports_loosening() -> None:
    loosened: list[str] = []
    book = QuotaBook(on_loosened=loosened.append, families=FAMILIES)
    book.replace([rq("a", "team", gpumem="8000"), rq("b", "team", gpucores="100")])
    quota = book.quota("team")
    assert quota is not None and quota.limits == QuotaLimits(8000, 100)
    assert book.quota("other") is None
    book.upsert(rq("c", "team", gpumem="6000"))  # tighter: nothing new may fit
    assert book.quota("team").limits == QuotaLimits(6000, 100)  # type: ignore[union-attr]
    assert loosened == []
    book.delete(rq("c", "team"))
    assert loosened == ["team"]
    book.upsert(rq("a", "team", gpumem="9000"))
    assert loosened == ["team", "team"]
    book.replace([rq("a", "team", gpumem="9000")])  # b gone: cores unlimited
    assert book.quota("team").limits == QuotaLimits(9000, None)  # type: ignore[union-attr]
    assert loosened == ["team", "team", "team"]
    # A quota without GPU keys limits nothing here.
    book.upsert({"metadata": {"uid": "a", "namespace": "team"}, "spec": {"hard": {"pods": "3"}}})
    assert book.quota("team") is None
    assert loosened[-1] == "team"


def test_book_lines_for_metrics() -> None:
    book = QuotaBook(families=FAMILIES)
    book.upsert(rq("a", "limited", gpumem="8000"))
    book.add("free", QuotaUsage(1000, 10))
    book.add("limited", QuotaUsage(3000, 0))
    assert list(book.lines()) == [
        QuotaLine("free", "nvidia.com/gpumem", None, 1000),
        QuotaLine("free", "nvidia.com/gpucores", None, 10),
        QuotaLine("limited", "nvidia.com/gpumem", 8000, 3000),
        QuotaLine("limited", "nvidia.com/gpucores", None, 0),
    ]
    book.remove("free", QuotaUsage(1000, 10))
    assert [line.namespace for line in book.lines()] == ["limited", "limited"]


CARD_MEMORY = (16384, 24576, 10000)


def gpu_nodes() -> list[dict[str, Any]]:
    nodes = []
    for n in range(2):
        devs = tuple(
            DeviceInfo(f"GPU-{n}-{c}", c, 4, mem, 100, "NVIDIA-A10", 0)
            for c, mem in enumerate(CARD_MEMORY)
        )
        nodes.append(
            {
                "metadata": {
                    "name": f"node-{n}",
                    "annotations": {"hami.io/node-nvidia-register": encode_node_devices(devs)},
                },
                "status": {"allocatable": {"nvidia.com/gpu": "12"}},
            }
        )
    return nodes


NAMESPACES = ("a", "b", "c")
place = st.tuples(
    st.sampled_from(NAMESPACES),
    st.lists(container, min_size=1, max_size=2),
    st.lists(container, max_size=1),
    st.booleans(),  # bound (annotations written) or only reserved
)
ops = st.lists(st.one_of(place, st.integers(0, 30)), max_size=30)
limits = st.fixed_dictionaries(
    {},
    optional={"gpumem": st.integers(0, 40000).map(str), "gpucores": st.integers(0, 300).map(str)},
)


def recount(cache: ClusterCache, namespace: str) -> QuotaUsage:
    """The namespace's usage summed from scratch over allocations and reservations."""
    total = QuotaUsage()
    for alloc in cache.pods():
        if alloc.namespace == namespace:
            total += allocation_usage(alloc.devices, alloc.n_init)
    return total


@settings(max_examples=150, deadline=None)
@given(st.tuples(limits, limits), ops)
def test_no_namespace_ever_exceeds_its_quota(
    quotas: tuple[dict[str, str], dict[str, str]], operations: list[Any]
) -> None:
    cache = ClusterCache(
        clock=lambda: 0.0, reservation_ttl=1e9, families=FAMILIES, resources=ResourceDefaults()
    )
    nodes = gpu_nodes()
    cache.replace_nodes(nodes)
    cache.quotas.replace([rq("qa", "a", **quotas[0]), rq("qb", "b", **quotas[1])])
    placement = Placement(cache, Defaults(), ResourceDefaults())
    names = [n["metadata"]["name"] for n in nodes]
    live: list[dict[str, Any]] = []
    reserved: dict[str, str] = {}  # uid -> namespace
    for i, op in enumerate(operations):
        if isinstance(op, int):
            if live:
                gone = live.pop(op % len(live))
                cache.delete_pod(gone)
                reserved.pop(gone["metadata"]["uid"], None)
            continue
        namespace, apps, inits, bind = op
        pod = manifest(i, (apps, inits, "spread", "binpack"))
        pod["metadata"]["namespace"] = namespace
        out = placement.filter(pod, names)
        decision = out.decision
        if decision is None or decision.node is None or decision.devices is None:
            continue
        if bind:
            pod["metadata"]["annotations"] = allocation_annotations(
                decision.node, decision.devices, 0, families=FAMILIES
            )
            pod["spec"]["nodeName"] = decision.node
            cache.upsert_pod(pod)
        else:
            reserved[pod["metadata"]["uid"]] = namespace
        live.append(pod)
        for ns in NAMESPACES:
            held = recount(cache, ns)
            for uid, res_ns in reserved.items():
                res = cache.reservation(uid)
                if res_ns == ns and res is not None:
                    held += allocation_usage(res.devices, res.n_init)
            assert cache.quotas.used(ns) == held, ns
            quota = cache.quotas.quota(ns)
            if quota is not None:
                assert quota.fits(QuotaUsage()), (ns, quota)
    for pod in live:
        cache.delete_pod(pod)
    assert all(cache.quotas.used(ns) == QuotaUsage() for ns in NAMESPACES)
