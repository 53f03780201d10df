"""Invariants over arbitrary sequences of pods placed and deleted through the filter service."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.cache.store import ClusterCache
from hami.engine.codec import encode_node_devices
from hami.engine.model import DeviceInfo
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.service.annotations import allocation_annotations
from hami.service.placement import Placement
from tests.builders import FAMILIES

POLICIES = [
    "spread",
    "binpack",
    "mutex",
    "mutex,binpack",
    "binpack,spread",
    "numa,spread",
    "mutex,spread,numa",
]

container = st.fixed_dictionaries(
    {"nvidia.com/gpu": st.integers(1, 3)},
    optional={
        "nvidia.com/gpumem": st.integers(1, 20000),
        "nvidia.com/gpumem-percentage": st.integers(1, 100),
        "nvidia.com/gpucores": st.integers(0, 100),
    },
)
pod_spec = st.tuples(
    st.lists(container, min_size=1, max_size=3),
    st.lists(container, max_size=2),
    st.sampled_from(POLICIES),
    st.sampled_from(["binpack", "spread"]),
)
ops = st.lists(st.one_of(pod_spec, st.integers(0, 30)), max_size=40)


def cluster() -> tuple[ClusterCache, Placement, list[dict[str, Any]]]:
    cache = ClusterCache(
        clock=lambda: 0.0, reservation_ttl=1e9, families=FAMILIES, resources=ResourceDefaults()
    )
    nodes = []
    for n in range(3):
        devs = tuple(
            DeviceInfo(f"GPU-{n}-{c}", c, 4, 10000 + 2000 * c, 100, "NVIDIA-Tesla T4", c % 2)
            for c in range(3)
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
    cache.replace_nodes(nodes)
    return cache, Placement(cache, Defaults(), ResourceDefaults()), nodes


def manifest(i: int, spec: tuple[Any, ...]) -> dict[str, Any]:
    apps, inits, gpu_policy, node_policy = spec
    return {
        "metadata": {
            "name": f"p{i}",
            "namespace": "t",
            "uid": f"u{i}",
            "annotations": {
                "hami.io/gpu-scheduler-policy": gpu_policy,
                "hami.io/node-scheduler-policy": node_policy,
            },
        },
        "spec": {
            "initContainers": [
                {"name": f"i{k}", "resources": {"limits": c}} for k, c in enumerate(inits)
            ],
            "containers": [
                {"name": f"c{k}", "resources": {"limits": c}} for k, c in enumerate(apps)
            ],
        },
        "status": {"phase": "Pending"},
    }


def replay(operations: list[Any]) -> tuple[ClusterCache, list[str | None]]:
    cache, placement, nodes = cluster()
    live: list[dict[str, Any]] = []
    placements: list[str | None] = []
    for i, op in enumerate(operations):
        if isinstance(op, int):
            if live:
                cache.delete_pod(live.pop(op % len(live)))
            continue
        pod = manifest(i, op)
        users_before = {c.info.id: c.usage.used for n in cache.view.values() for c in n.cards}
        out = placement.filter(pod, [n["metadata"]["name"] for n in nodes])
        d = out.decision
        placements.append(d.allocation if d else None)
        if d is None or d.node is None or d.devices is None:
            continue
        if "mutex" in op[2]:
            assert all(users_before[x.uuid] == 0 for c in d.devices for x in c)
        pod["metadata"]["annotations"].update(
            allocation_annotations(d.node, d.devices, 0, families=FAMILIES)
        )
        pod["spec"]["nodeName"] = d.node
        cache.upsert_pod(pod)
        live.append(pod)
        check_capacity(cache)
    return cache, placements


def check_capacity(cache: ClusterCache) -> None:
    for node in cache.view.values():
        for card in node.cards:
            u, info = card.usage, card.info
            assert 0 <= u.used <= info.count, (node.name, card)
            assert 0 <= u.usedmem <= info.devmem, (node.name, card)
            assert 0 <= u.usedcores <= info.devcore, (node.name, card)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_no_card_is_ever_over_committed(operations: list[Any]) -> None:
    cache, _ = replay(operations)
    check_capacity(cache)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_identical_states_give_identical_placements(operations: list[Any]) -> None:
    assert replay(operations)[1] == replay(operations)[1]


@settings(max_examples=60, deadline=None)
@given(ops)
def test_deleting_everything_frees_every_card(operations: list[Any]) -> None:
    cache, _ = replay([*operations, *([0] * len(operations))])
    assert all(c.usage.empty for n in cache.view.values() for c in n.cards)
