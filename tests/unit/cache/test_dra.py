"""The DRA side of the books (hami.cache.dra): a card a DRA driver publishes under the UUID the
device plugin registered is one card, whose usage is the pods' and the claims' summed, in any
order the events come; quotas count the claims too."""

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.cache.store import ClusterCache
from hami.engine.model import ContainerDevice, Usage
from hami.engine.quota import QuotaUsage
from hami.engine.requests import ResourceDefaults
from hami.service.annotations import allocation_annotations
from tests.builders import FAMILIES, T4_MIB, allocated_pod, gpu_pod, registered_node, t4s
from tests.draobjects import allocated_claim, gpu_device, mib, resource_slice
from tests.unit.engine.manifests import manifest
from tests.unit.engine.propcluster import check_capacity, cluster, ops


def node_slice(node: str, uuids: list[str], generation: int = 1) -> dict[str, Any]:
    devices = [gpu_device(f"gpu-{i}", u, memory_mib=T4_MIB, index=i) for i, u in enumerate(uuids)]
    return resource_slice(node, devices, generation=generation)


def card(cache: ClusterCache, node: str, uuid: str) -> Usage:
    (found,) = [c.usage for c in cache.view[node].cards if c.info.id == uuid]
    return found


def both_worlds() -> tuple[ClusterCache, list[str]]:
    cache = ClusterCache(
        clock=lambda: 0.0, reservation_ttl=1e9, families=FAMILIES, resources=ResourceDefaults()
    )
    cards = t4s(2, prefix="GPU-n1")
    cache.replace_nodes([registered_node("n1", cards)])
    return cache, [c.id for c in cards]


def test_a_claim_on_a_card_the_device_plugin_registered_is_counted_on_that_one_card() -> None:
    cache, (a, b) = both_worlds()
    pod = gpu_pod("p", mem=3000, node="n1")
    pod["metadata"]["annotations"] = allocation_annotations(
        "n1", ((ContainerDevice(b, 3000, 0),),), 0, families=FAMILIES
    )
    cache.upsert_pod(pod)
    cache.dra.upsert_slice(node_slice("n1", [a, b]))
    cache.dra.upsert_claim(
        allocated_claim("c", "ns", "n1", [("gpu-1", {"memory": mib(4000), "cores": "20"})])
    )
    assert len(cache.view["n1"].cards) == 2  # one card each, not one per world
    assert card(cache, "n1", b) == Usage(2, 7000, 20)
    assert card(cache, "n1", a) == Usage()
    # The claim's namespace is charged for it beside the pod (limits.nvidia.com/gpumem).
    assert cache.quotas.used("ns") == QuotaUsage(7000, 20)


def test_the_count_does_not_depend_on_the_order_of_slices_and_claims() -> None:
    events = [
        ("slice", node_slice("n1", ["GPU-n1-0", "GPU-n1-1"])),
        (
            "claim",
            allocated_claim("c1", "ns", "n1", [("gpu-0", {"memory": mib(1000), "cores": "10"})]),
        ),
        (
            "claim",
            allocated_claim(
                "c2", "ns", "n1", [("gpu-0", {"memory": mib(2000), "cores": "20"}), ("gpu-1", {})]
            ),
        ),
    ]
    seen = set()
    for order in itertools.permutations(events):
        cache, _ = both_worlds()
        for kind, obj in order:
            (cache.dra.upsert_slice if kind == "slice" else cache.dra.upsert_claim)(obj)
        seen.add(tuple(c.usage for c in cache.view["n1"].cards))
    # The second card is taken whole: the claim recorded no capacity consumed there.
    assert seen == {(Usage(2, 3000, 30), Usage(1, T4_MIB, 100))}


def test_a_pool_republished_or_withdrawn_and_a_claim_deallocated_are_recounted_and_announced() -> (
    None
):
    freed: list[str] = []
    cache = ClusterCache(
        clock=lambda: 0.0, on_release=freed.append, families=FAMILIES, resources=ResourceDefaults()
    )
    cache.replace_nodes([registered_node("n1", t4s(1, prefix="GPU-n1"))])
    claim = allocated_claim("c", "ns", "n1", [("gpu-0", {"memory": mib(5000), "cores": "10"})])
    cache.dra.upsert_claim(claim)
    assert card(cache, "n1", "GPU-n1-0") == Usage()  # no slice yet: no card of DRA's
    cache.dra.upsert_slice(node_slice("n1", ["GPU-n1-0"]))
    assert card(cache, "n1", "GPU-n1-0") == Usage(1, 5000, 10)
    freed.clear()  # the node's registration announced its new cards
    # A newer generation that no longer has the device: the claim holds no card of it.
    cache.dra.upsert_slice(
        {**node_slice("n1", [], generation=2), "metadata": {"uid": "s2", "name": "s2"}}
    )
    assert card(cache, "n1", "GPU-n1-0") == Usage() and freed == ["n1"]
    cache.dra.delete_slice({"metadata": {"uid": "s2"}})
    assert card(cache, "n1", "GPU-n1-0") == Usage(1, 5000, 10)
    del claim["status"]["allocation"]
    cache.dra.upsert_claim(claim)
    assert card(cache, "n1", "GPU-n1-0") == Usage() and freed == ["n1", "n1"]


def check(cache: ClusterCache, live_claims: list[tuple[str, int, dict[str, Any]]]) -> None:
    """Every card within its capacity, with at least the memory the claims on it consumed."""
    check_capacity(cache)
    held = {c.info.id: c.usage.usedmem for n in cache.view.values() for c in n.cards}
    for uuid, memory, _ in live_claims:
        held[uuid] -= memory
    assert min(held.values()) >= 0, held


claims = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(1, 12000), st.integers(0, 100)),
    max_size=8,
)


@settings(max_examples=100, deadline=None)
@given(claims, ops)
def test_no_card_is_over_capacity_in_the_merged_count(
    asked: list[tuple[int, int, int, int]], operations: list[Any]
) -> None:
    """Claims kube-scheduler allocated on the cards both worlds share (each within what the
    other claims left, at most two a card), then HAMi's pods placed and pods and claims
    deleted in any order: no card's summed usage passes its memory, cores or slots, and
    everything deleted frees every card."""
    cache, placement, nodes = cluster()
    for n, node in enumerate(nodes):
        devs = [
            gpu_device(f"gpu-{c}", f"GPU-{n}-{c}", memory_mib=10000 + 2000 * c, index=c)
            for c in range(3)
        ]
        cache.dra.upsert_slice(resource_slice(node["metadata"]["name"], devs))
    left: dict[tuple[int, int], tuple[int, int, int]] = {}
    live_claims: list[tuple[str, int, dict[str, Any]]] = []
    for i, (n, c, memory, cores) in enumerate(asked):
        mem_left, cores_left, slots = left.get((n, c), (10000 + 2000 * c, 100, 2))
        if memory > mem_left or cores > cores_left or not slots:
            continue  # the allocator would not have put it there
        left[(n, c)] = (mem_left - memory, cores_left - cores, slots - 1)
        consumed = {"memory": mib(memory), "cores": str(cores)}
        claim = allocated_claim(f"c{i}", "t", f"node-{n}", [(f"gpu-{c}", consumed)])
        cache.dra.upsert_claim(claim)
        live_claims.append((f"GPU-{n}-{c}", memory, claim))
    check(cache, live_claims)
    live: list[dict[str, Any]] = []
    for i, op in enumerate(operations):
        if isinstance(op, int):
            if op % 2 and live_claims:
                cache.dra.delete_claim(live_claims.pop(op % len(live_claims))[2])
            elif live:
                cache.delete_pod(live.pop(op % len(live)))
            continue
        pod = manifest(i, op)
        d = placement.filter(pod, [n["metadata"]["name"] for n in nodes]).decision
        if d is not None and d.node is not None and d.devices is not None:
            pod["metadata"]["annotations"].update(
                allocation_annotations(d.node, d.devices, 0, families=FAMILIES)
            )
            pod["spec"]["nodeName"] = d.node
            cache.upsert_pod(pod)
            live.append(pod)
        check(cache, live_claims)
    for _, _, claim in live_claims:
        cache.dra.delete_claim(claim)
    for pod in live:
        cache.delete_pod(pod)
    assert all(c.usage.empty for n in cache.view.values() for c in n.cards)


def test_a_placed_claim_takes_over_its_reservation_in_one_step() -> None:
    """The DRA placer's reservation holds the card until the claim pinned to it is counted,
    and ends in that same step: the card is never counted twice nor left free between."""
    cache, (a, _) = both_worlds()
    cache.dra.upsert_slice(node_slice("n1", [a, "GPU-n1-1"]))
    devices = ((ContainerDevice(a, 3000, 20),),)
    cache.reserve("u-p", "ns", "p", "n1", devices, 0, claims=1)
    # kube-scheduler binds the pod (no GPU limits left, its claims name the cards) ...
    pod = gpu_pod("p", mem=None, uid="u-p", node="n1")
    pod["spec"]["containers"][0]["resources"] = {}
    cache.upsert_pod(pod)
    assert card(cache, "n1", a) == Usage(1, 3000, 20)
    # ... and its claim's allocation arrives.
    claim = allocated_claim("p-c", "ns", "n1", [("gpu-0", {"memory": mib(3000), "cores": "20"})])
    claim["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": "p", "uid": "u-p"}]
    cache.dra.upsert_claim(claim)
    assert card(cache, "n1", a) == Usage(1, 3000, 20)
    assert cache.reservation("u-p") is None
    assert cache.quotas.used("ns") == QuotaUsage(3000, 20)
    cache.dra.delete_claim(claim)
    assert card(cache, "n1", a) == Usage()


def served_through_the_mapping(pod: dict[str, Any], claim: str) -> dict[str, Any]:
    """The pod as kube-scheduler leaves it once it has served its nvidia.com/gpu through a
    DeviceClass's extendedResourceName (KEP-5004): the claim it made named in the status."""
    mapping = {"containerName": "c", "resourceName": "nvidia.com/gpu", "requestName": "c-0"}
    status = {"resourceClaimName": claim, "requestMappings": [mapping]}
    return {**pod, "status": {**pod["status"], "extendedResourceClaimStatus": status}}


@pytest.mark.parametrize("bound_by", ["our extender", "another scheduler"])
def test_a_pod_served_through_the_mapping_is_counted_once_by_its_claim(bound_by: str) -> None:
    cache, (a, b) = both_worlds()
    cache.dra.upsert_slice(node_slice("n1", [a, b]))
    # kube-scheduler's claim for the pod's nvidia.com/gpu asks no capacity: the whole card.
    cache.dra.upsert_claim(allocated_claim("p-extended-resources-x", "ns", "n1", [("gpu-1", {})]))
    if bound_by == "our extender":
        pod = allocated_pod("p", b, mem=None, node="n1", written_node="n1")
    else:  # no allocation written
        pod = allocated_pod("p", None, mem=None, node="n1", scheduler="default-scheduler")
    served = served_through_the_mapping(pod, "p-extended-resources-x")
    cache.upsert_pod(served)
    assert card(cache, "n1", b) == Usage(1, T4_MIB, 100)
    assert card(cache, "n1", a) == Usage()
    assert cache.allocation("p") is None and list(cache.outside()) == []
    assert cache.quotas.used("ns") == QuotaUsage(T4_MIB, 100)
    # The same pod without the claim in its status is the device plugin's: counted by itself.
    cache.delete_pod(served)
    cache.dra.delete_claim(allocated_claim("p-extended-resources-x", "ns", "n1", []))
    cache.upsert_pod(pod)
    held = [c.usage for c in cache.view["n1"].cards if c.usage != Usage()]
    assert held == [Usage(1, T4_MIB, 100)], held


def nvidia_slice(node: str, parent: str) -> dict[str, Any]:
    """What NVIDIA's DRA driver publishes for an A100 with MIG devices (attributes as its
    CommonAttributesMig writes them): the full GPU, a static MIG device with a UUID of its own
    and its parent's as parentUUID, and a dynamic one (partitionable devices) with no UUID,
    consuming the full GPU's counter set."""
    full = {
        "name": "gpu-0",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": parent},
            "productName": {"string": "NVIDIA A100-SXM4-40GB"},
        },
        "capacity": {"memory": {"value": mib(40960)}, "multiprocessors": {"value": "98"}},
        "consumesCounters": [{"counterSet": "gpu-0-counter-set", "counters": {}}],
    }

    def mig(name: str, **attributes: dict[str, str]) -> dict[str, Any]:
        return {
            "name": name,
            "attributes": {"type": {"string": "mig"}, "profile": {"string": "1g.5gb"}} | attributes,
            "capacity": {"memory": {"value": mib(4864)}, "multiprocessors": {"value": "14"}},
        }

    static = mig("gpu-0-mig-1g5gb-19-0", uuid={"string": "MIG-1"}, parentUUID={"string": parent})
    dynamic = mig("gpu-0-mig-1g5gb-19-1") | {
        "consumesCounters": [{"counterSet": "gpu-0-counter-set", "counters": {}}]
    }
    return resource_slice(node, [full, static, dynamic], driver="gpu.nvidia.com")


def test_a_claim_on_a_mig_device_is_counted_on_its_parent_card() -> None:
    cache = ClusterCache(
        clock=lambda: 0.0, reservation_ttl=1e9, families=FAMILIES, resources=ResourceDefaults()
    )
    a100 = t4s(1, prefix="GPU-a100")  # registered by HAMi's device plugin under the same UUID
    parent = a100[0].id
    cache.replace_nodes([registered_node("n1", a100)])
    cache.dra.upsert_slice(nvidia_slice("n1", parent))
    assert [d.uuid for d in cache.dra.devices()] == [parent]  # a MIG device is not a card
    for i, device in enumerate(["gpu-0-mig-1g5gb-19-0", "gpu-0-mig-1g5gb-19-1"]):
        claim = allocated_claim(f"mig-{i}", "ns", "n1", [(device, {})], driver="gpu.nvidia.com")
        cache.dra.upsert_claim(claim)
    # Each holds its instance's memory and its share of the SMs (14 of 98: 15%) of the card.
    assert card(cache, "n1", parent) == Usage(2, 2 * 4864, 2 * 15)
    assert cache.quotas.used("ns") == QuotaUsage(2 * 4864, 2 * 15)
