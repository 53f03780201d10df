"""The property tests' cluster: three nodes of three cards each, the Placement over it, the
pods drawn to place and delete on it (ops), and the invariant no card is over-committed."""

from typing import Any

from hypothesis import strategies as st

from hami.cache.store import ClusterCache
from hami.engine.codec import encode_node_devices
from hami.engine.model import DeviceInfo
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.service.placement import Placement
from tests.builders import FAMILIES
from tests.unit.engine.manifests import container

POLICIES = [
    "spread",
    "binpack",
    "mutex",
    "mutex,binpack",
    "binpack,spread",
    "numa,spread",
    "mutex,spread,numa",
]

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


def check_capacity(cache: ClusterCache) -> None:
    for node in cache.view.values():
        for card in node.cards:
            u, info = card.usage, card.info
            assert 0 <= u.used <= info.count, (node.name, card)
            assert 0 <= u.usedmem <= info.devmem, (node.name, card)
            assert 0 <= u.usedcores <= info.devcore, (node.name, card)
