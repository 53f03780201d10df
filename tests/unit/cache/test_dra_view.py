"""The DRA placer's view (ClusterCache.dra_view) is kept between calls and only its changed
nodes are built again: after any sequence of events, of every kind the view depends on, it
equals the view a fresh cache builds from the objects as they stand then."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.cache.store import ClusterCache
from hami.engine.model import ContainerDevice
from hami.engine.requests import ResourceDefaults
from hami.service.annotations import allocation_annotations
from tests.builders import FAMILIES, T4_MIB, gpu_pod, registered_node, t4
from tests.draobjects import allocated_claim, gpu_device, mib, resource_slice

NODES = ("n0", "n1", "n2")
# Card i of a node is GPU-<node>-<i>; the device plugin registers some of them, a DRA driver
# publishes some of them (as gpu-<i>), so a card is in one world or both.
CARDS = 3


def uuid(node: str, i: int) -> str:
    return f"GPU-{node}-{i}"


def new_cache() -> ClusterCache:
    return ClusterCache(
        clock=lambda: 0.0, reservation_ttl=1e9, families=FAMILIES, resources=ResourceDefaults()
    )


class World:
    """The objects as the API holds them, and the reservations the cache holds."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.slices: dict[str, dict[str, Any]] = {}
        self.claims: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.reserved: dict[str, tuple[str, str, int]] = {}
        self.made = 0  # pods created

    def apply(self, cache: ClusterCache, event: tuple[Any, ...]) -> None:
        kind, node, *rest = event
        if kind == "node":
            (cards,) = rest
            obj = registered_node(node, [t4(i, uuid=uuid(node, i)) for i in cards])
            self.nodes[node] = obj
            cache.upsert_node(obj)
        elif kind == "node-gone":
            if node in self.nodes:
                del self.nodes[node]
                cache.delete_node({"metadata": {"name": node}})
        elif kind == "slice":
            cards, generation, memory = rest
            devices = [
                gpu_device(f"gpu-{i}", uuid(node, i), memory_mib=memory, index=i) for i in cards
            ]
            obj = resource_slice(node, devices, generation=generation, uid=f"slice-{node}")
            self.slices[node] = obj
            cache.dra.upsert_slice(obj)
        elif kind == "slice-gone":
            if node in self.slices:
                obj = self.slices.pop(node)
                cache.dra.delete_slice(obj)
        elif kind == "claim":
            name, card, memory = rest
            obj = allocated_claim(
                name, "ns", node, [(f"gpu-{card}", {"memory": mib(memory), "cores": "0"})]
            )
            self.claims[name] = obj
            cache.dra.upsert_claim(obj)
        elif kind == "claim-gone":
            (name,) = rest
            if name in self.claims:
                obj = self.claims.pop(name)
                cache.dra.delete_claim(obj)
        elif kind == "pod":
            # A bound pod's allocation is not edited (the cache ignores such edits): a pod
            # of the same name is a new pod, the old one deleted first.
            name, card, memory = rest
            if name in self.pods:
                cache.delete_pod(self.pods.pop(name))
            self.made += 1
            pod = gpu_pod(name, mem=memory, node=node, phase="Running", uid=f"uid-{self.made}")
            pod["metadata"]["annotations"] = allocation_annotations(
                node, ((ContainerDevice(uuid(node, card), memory, 0),),), 0, families=FAMILIES
            )
            self.pods[name] = pod
            cache.upsert_pod(pod)
        elif kind == "pod-gone":
            (name,) = rest
            if name in self.pods:
                cache.delete_pod(self.pods.pop(name))
        elif kind == "reserve":
            name, card, memory = rest
            self.reserved[name] = (node, uuid(node, card), memory)
            self.reserve(cache, name)
        elif kind == "forget":
            (name,) = rest
            self.reserved.pop(name, None)
            cache.forget(f"res-{name}")

    def reserve(self, cache: ClusterCache, name: str) -> None:
        node, card, memory = self.reserved[name]
        devices = ((ContainerDevice(card, memory, 0),),)
        cache.reserve(f"res-{name}", "ns", name, node, devices, 0)

    def fresh(self) -> ClusterCache:
        cache = new_cache()
        cache.replace_nodes(list(self.nodes.values()))
        cache.dra.replace_slices(list(self.slices.values()))
        cache.dra.replace_claims(list(self.claims.values()))
        cache.replace_pods(list(self.pods.values()))
        for name in self.reserved:
            self.reserve(cache, name)
        return cache


nodes = st.sampled_from(NODES)
cards = st.lists(st.integers(0, CARDS - 1), unique=True, max_size=CARDS)
card = st.integers(0, CARDS - 1)
names = st.sampled_from(("a", "b", "c"))
memory = st.sampled_from((500, 1000, 4000))
events = st.one_of(
    st.tuples(st.just("node"), nodes, cards),
    st.tuples(st.just("node-gone"), nodes),
    st.tuples(st.just("slice"), nodes, cards, st.integers(1, 3), st.sampled_from((T4_MIB, 8000))),
    st.tuples(st.just("slice-gone"), nodes),
    st.tuples(st.just("claim"), nodes, names, card, memory),
    st.tuples(st.just("claim-gone"), nodes, names),
    st.tuples(st.just("pod"), nodes, names, card, memory),
    st.tuples(st.just("pod-gone"), nodes, names),
    st.tuples(st.just("reserve"), nodes, names, card, memory),
    st.tuples(st.just("forget"), nodes, names),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(events, max_size=25), st.lists(st.booleans(), min_size=25, max_size=25))
def test_the_view_equals_a_fresh_build_after_every_event(
    history: list[tuple[Any, ...]], read: list[bool]
) -> None:
    world, cache = World(), new_cache()
    for event, look in zip(history, read, strict=False):
        world.apply(cache, event)
        if look:  # the placer reads the view between some events, not after every one
            fresh = world.fresh()
            assert dict(cache.dra_view()) == dict(fresh.dra_view()), event
            assert cache.dra.nodes() == fresh.dra.nodes()
    fresh = world.fresh()
    assert dict(cache.dra_view()) == dict(fresh.dra_view())
    assert cache.dra.nodes() == fresh.dra.nodes()
    for node in NODES:
        assert cache.dra.devices(node) == fresh.dra.devices(node)


def test_a_view_read_before_a_claim_is_not_the_view_after_it() -> None:
    """The view is the cache's own, kept between calls: a claim counted since the last call
    shows on its card in the next."""
    world, cache = World(), new_cache()
    world.apply(cache, ("slice", "n0", [0, 1], 1, T4_MIB))
    before = cache.dra_view()["n0"]
    world.apply(cache, ("claim", "n0", "a", 1, 4000))
    after = cache.dra_view()["n0"]
    assert [c.usage.usedmem for c in before.cards] == [0, 0]
    assert [c.usage.usedmem for c in after.cards] == [0, 4000]
