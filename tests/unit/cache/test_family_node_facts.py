"""A family's node score reads the node's annotations its FamilyWire.node_reads names, as the
cache keeps them (MetaX GPU scores a node by the link losses its device plugin writes there)."""

from typing import Any

from hami.cache.store import ClusterCache
from hami.engine.families.metax.config import GPU_LOSSES
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.service.placement import Placement
from tests.builders import FAMILIES, family_pod

GPU = FAMILIES.by_type()["Metax-GPU"]


def metax_node(name: str, loss_of_one: int) -> dict[str, Any]:
    """Four whole MetaX GPUs (registered as capacity), one card's link loss `loss_of_one`."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {GPU_LOSSES: f'{{"1": {loss_of_one}, "2": 10, "4": 30}}'},
        },
        "status": {
            "allocatable": {"metax-tech.com/gpu": "4"},
            "capacity": {"metax-tech.com/gpu": "4"},
        },
    }


def test_binpack_prefers_the_node_with_the_lower_link_loss_and_follows_its_changes() -> None:
    cache = ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([metax_node("a", 100), metax_node("b", 0)])
    placement = Placement(cache, Defaults(), ResourceDefaults())
    pod = family_pod("p", GPU)
    assert cache.view["b"].annotations == {GPU_LOSSES: '{"1": 0, "2": 10, "4": 30}'}
    out = placement.filter(pod, ["a", "b"])
    assert out.node_names == ["b"]  # 2000 - 0 beats 2000 - 100
    cache.forget("uid-p")
    cache.upsert_node(metax_node("b", 200))
    assert placement.filter(pod, ["a", "b"]).node_names == ["a"]
