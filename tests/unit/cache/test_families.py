"""Family cards in the cache: counted from each pod's allocation annotation and from filter's
reservations, released on delete, never over-committed; NVIDIA's quotas do not count them."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.cache.store import ClusterCache
from hami.engine import nvidianames as names
from hami.engine.codec import encode_node_devices
from hami.engine.families.hygon import HYGON
from hami.engine.model import ContainerDevice, Usage
from hami.engine.policy import Defaults
from hami.engine.quota import QuotaUsage
from hami.engine.requests import ResourceDefaults
from hami.service.annotations import allocation_annotations
from hami.service.placement import Placement
from tests.builders import FAMILIES, family_node, family_pod, sample_card, t4

NODES = ("node-0", "node-1")


def cluster() -> tuple[ClusterCache, Placement]:
    """Two DCUs on each node; node-0 has two T4s (split 4) beside them."""
    cache = ClusterCache(
        clock=lambda: 0.0, reservation_ttl=1e9, families=FAMILIES, resources=ResourceDefaults()
    )
    nodes = [
        family_node(n, HYGON, [sample_card(HYGON, i, uuid=f"{n}-DCU-{i}") for i in range(2)])
        for n in NODES
    ]
    t4s = tuple(t4(i, uuid=f"node-0-GPU-{i}", count=4) for i in range(2))
    nodes[0]["metadata"]["annotations"][names.NODE_REGISTER] = encode_node_devices(t4s)
    nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    cache.replace_nodes(nodes)
    return cache, Placement(cache, Defaults(), ResourceDefaults())


def dcu_usage(cache: ClusterCache) -> dict[str, Usage]:
    return {c.info.id: c.usage for n in cache.view.values() for c in n.families.get("DCU", ())}


def test_a_bound_pods_dcus_count_until_it_is_deleted() -> None:
    cache, placement = cluster()
    pod = family_pod("p", HYGON, mem=1000)
    out = placement.filter(pod, list(NODES))
    d = out.decision
    assert d is not None and d.node is not None and d.devices is not None
    taken = d.devices[0][0].uuid
    # Reserved at filter: counted before any annotation is written.
    assert dcu_usage(cache)[taken] == Usage(1, 1000, 100)
    pod["metadata"]["annotations"].update(
        allocation_annotations(d.node, d.devices, 0, families=FAMILIES)
    )
    pod["spec"]["nodeName"] = d.node
    cache.upsert_pod(pod)
    assert cache.reservation("uid-p") is None
    assert dcu_usage(cache)[taken] == Usage(1, 1000, 100)
    cache.delete_pod(pod)
    assert all(u.empty for u in dcu_usage(cache).values())


def test_a_bind_refuses_a_dcu_an_allocation_took_since_filter() -> None:
    cache, _ = cluster()
    devices = ((ContainerDevice("node-0-DCU-1", 32768, 100, "DCU"),),)
    cache.reserve("u1", "ns", "a", "node-0", devices, 0)
    assert cache.overcommitted("node-0", devices) == []
    cache.reserve("u2", "ns", "b", "node-0", devices, 0)
    assert cache.overcommitted("node-0", devices) == ["node-0-DCU-1 (65536 MiB counted of 32768)"]


def test_nvidias_quota_does_not_count_dcus() -> None:
    cache, _ = cluster()
    devices = ((ContainerDevice("node-0-DCU-1", 1000, 30, "DCU"),),)
    cache.reserve("u1", "ns", "a", "node-0", devices, 0)
    assert cache.quotas.used("ns") == QuotaUsage()
    nvidia = ((ContainerDevice("GPU-0", 500, 10),),)
    cache.reserve("u2", "ns", "b", "node-1", nvidia, 0)
    assert cache.quotas.used("ns") == QuotaUsage(500, 10)
    cache.forget("u1")
    assert all(u.empty for u in dcu_usage(cache).values())


dcu = st.fixed_dictionaries(
    {"hygon.com/dcunum": st.integers(1, 2)},
    optional={"hygon.com/dcumem": st.integers(1, 40000), "hygon.com/dcucores": st.integers(0, 100)},
)
nvidia = st.fixed_dictionaries(
    {"nvidia.com/gpu": st.integers(1, 2)},
    optional={
        "nvidia.com/gpumem": st.integers(1, 20000),
        "nvidia.com/gpucores": st.integers(0, 100),
    },
)
# A container asking DCUs, NVIDIA cards, or both (a pod asking two families).
container = st.one_of(dcu, nvidia, st.tuples(dcu, nvidia).map(lambda both: {**both[0], **both[1]}))
pod_spec = st.tuples(
    st.lists(container, min_size=1, max_size=2),
    st.lists(container, max_size=1),
    st.sampled_from(["binpack", "spread", "mutex"]),
    st.sampled_from(["binpack", "spread"]),
    st.booleans(),  # bound (its annotations seen) or only reserved
)
ops = st.lists(st.one_of(pod_spec, st.integers(0, 30)), max_size=30)


def limits(container: dict[str, int]) -> dict[str, str]:
    return {k: str(v) for k, v in container.items()}


def manifest(i: int, spec: tuple[Any, ...]) -> dict[str, Any]:
    apps, inits, gpu_policy, node_policy, _ = spec
    pod = family_pod(f"p{i}", HYGON)
    pod["metadata"]["annotations"] = {
        "hami.io/gpu-scheduler-policy": gpu_policy,
        "hami.io/node-scheduler-policy": node_policy,
    }
    pod["spec"]["initContainers"] = [
        {"name": f"i{k}", "resources": {"limits": limits(c)}} for k, c in enumerate(inits)
    ]
    pod["spec"]["containers"] = [
        {"name": f"c{k}", "resources": {"limits": limits(c)}} for k, c in enumerate(apps)
    ]
    return pod


def check_capacity(cache: ClusterCache) -> None:
    """Every card, DCU or NVIDIA, holds at most its slots, memory and cores."""
    over = [
        (node.name, c)
        for node in cache.view.values()
        for c in node.all_cards()
        if not (
            0 <= c.usage.used <= c.info.count
            and 0 <= c.usage.usedmem <= c.info.devmem
            and 0 <= c.usage.usedcores <= c.info.devcore
        )
    ]
    assert not over, over


@settings(max_examples=120, deadline=None)
@given(ops)
def test_no_family_card_is_ever_over_committed(operations: list[Any]) -> None:
    cache, placement = cluster()
    assert len(dcu_usage(cache)) == 4  # the nodes' DCUs are registered
    live: list[dict[str, Any]] = []
    for i, op in enumerate(operations):
        if isinstance(op, int):
            if live:
                cache.delete_pod(live.pop(op % len(live)))
            continue
        pod = manifest(i, op)
        d = placement.filter(pod, list(NODES)).decision
        if d is None or d.node is None or d.devices is None:
            continue
        if op[4]:
            pod["metadata"]["annotations"].update(
                allocation_annotations(d.node, d.devices, 0, families=FAMILIES)
            )
            pod["spec"]["nodeName"] = d.node
            cache.upsert_pod(pod)
        live.append(pod)
        check_capacity(cache)
    for pod in live:
        cache.delete_pod(pod)
    assert all(c.usage.empty for n in cache.view.values() for c in n.all_cards())


def test_a_dcu_on_a_node_whose_nvidia_cards_come_from_gfd_labels_takes_the_lock() -> None:
    """GKE's NVIDIA plugin knows nothing of HAMi's lock; the DCU vendor's plugin does."""
    cache = ClusterCache(
        clock=lambda: 0.0, gfd_split=2, families=FAMILIES, resources=ResourceDefaults()
    )
    node = family_node("n", HYGON, [sample_card(HYGON, 0)])
    node["metadata"]["labels"] = {
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.memory": "15360",
        "nvidia.com/gpu.product": "Tesla-T4",
    }
    node["status"]["allocatable"]["nvidia.com/gpu"] = "1"
    cache.upsert_node(node)
    inv = cache.inventory("n")
    assert inv is not None and not inv.handshake and inv.families
    dcu = ((ContainerDevice("DCU-0", 0, 100, "DCU"),),)
    assert cache.handshake("n", dcu)
    assert not cache.handshake("n", ((ContainerDevice(inv.devices[0].id, 0, 0),),))


def test_a_pod_bound_outside_the_scheduler_holds_whole_dcus() -> None:
    """Bound by another scheduler with no allocation of ours, its vendor's plugin still gives it
    the devices: counted as whole DCUs (the least used), so nothing is placed on them."""
    cache, placement = cluster()
    outsider = family_pod("outsider", HYGON, count=2)
    outsider["spec"]["schedulerName"] = "default-scheduler"
    outsider["spec"]["nodeName"] = "node-1"
    outsider["status"]["phase"] = "Running"
    cache.upsert_pod(outsider)
    claim = cache.claim("uid-outsider")
    assert claim is not None and claim.families == (("DCU", 2),) and claim.cards == 0
    held = {k: u for k, u in dcu_usage(cache).items() if k.startswith("node-1")}
    assert held == {"node-1-DCU-0": Usage(1, 32768, 100), "node-1-DCU-1": Usage(1, 32768, 100)}
    assert set(cache.outside_cards("node-1")) == {"node-1-DCU-0", "node-1-DCU-1"}
    decision = placement.filter(family_pod("p", HYGON), ["node-1"]).decision
    assert decision is not None and decision.node is None
    cache.delete_pod(outsider)
    assert all(u.empty for u in dcu_usage(cache).values())


def test_only_families_whose_plugins_read_hamis_lock_take_it() -> None:
    """Moore Threads' HAMi LockNode is a no-op (lock_name ""): its pods take no lock."""
    cache, _ = cluster()
    assert cache.handshake("node-1", ((ContainerDevice("node-1-DCU-0", 0, 100, "DCU"),),))
    threads = ((ContainerDevice("m-0", 0, 16, "Mthreads"),),)
    assert not cache.handshake("node-1", threads)
    nvidia_and_threads = ((ContainerDevice("node-0-GPU-0", 0, 0), *threads[0]),)
    assert cache.handshake("node-0", nvidia_and_threads)
