"""Whatever /filter chose, /bind's re-check accepts on the same cache, for every family,
NVIDIA's included (its fit through the FastPath, its re-check its room rule): a node
registered as each vendor's device plugin registers it (tests.builders.sample_node),
pods of drawn shapes filtered onto it one after the other (each reservation counted), and
after each placement ClusterCache.overcommitted, which /bind asks, names no card. The two ask
each family's one room rule (Family.room); an Ascend soft-split pod (`huawei.com/vnpu-mode:
hami-core`), whose fit counts a card as 100 cores whatever it registered, was refused by a
re-check that counted the registered 20."""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.cache.store import ClusterCache
from hami.engine.families.ascend.device import MODE_ANNOTATION, NODE_SOFT_ANNOTATION, SOFT
from hami.engine.families.base import Family
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.service.placement import Placement
from tests.builders import FAMILIES, sample_node

KINDS = [f.wire.type for f in FAMILIES.members]
ASCEND = [k for k in KINDS if k.startswith("Ascend")]


def node(family: Family, soft: bool) -> dict[str, Any]:
    return sample_node("n", family, **({NODE_SOFT_ANNOTATION: "true"} if soft else {}))


@st.composite
def pod(draw: Any, family: Family, number: int, soft_node: bool) -> dict[str, Any]:
    names = family.wire.resources
    limits: dict[str, str] = {names.count: str(draw(st.integers(1, 3)))}
    if names.memory and draw(st.booleans()):
        limits[names.memory] = str(draw(st.sampled_from([1, 8, 64, 1024, 8192, 16384, 40000])))
    if names.cores and draw(st.booleans()):
        limits[names.cores] = str(draw(st.sampled_from([1, 10, 20, 30, 50, 100])))
    soft = soft_node and draw(st.booleans())
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"p{number}",
            "namespace": "ns",
            "uid": f"uid-p{number}",
            "annotations": {MODE_ANNOTATION: SOFT} if soft else {},
        },
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending"},
    }


@st.composite
def situation(draw: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    kind = draw(st.sampled_from(KINDS))
    family = FAMILIES.by_type()[kind]
    soft = kind in ASCEND and draw(st.booleans())
    pods = [draw(pod(family, i, soft)) for i in range(draw(st.integers(1, 8)))]
    return node(family, soft), pods


def placed_and_rechecked(
    node_obj: dict[str, Any], pods: list[dict[str, Any]]
) -> tuple[int, list[str]]:
    """Each pod filtered onto the node in turn: how many were placed, and what the re-check
    refused of them."""
    cache = ClusterCache(
        clock=lambda: 0.0, reservation_ttl=1e9, families=FAMILIES, resources=ResourceDefaults()
    )
    cache.replace_nodes([node_obj])
    placement = Placement(cache, Defaults(), ResourceDefaults())
    placed, refused = 0, []
    for p in pods:
        cache.upsert_pod(p)
        decision = placement.filter(p, ["n"]).decision
        if decision is None or decision.node is None or decision.devices is None:
            continue
        placed += 1
        over = cache.overcommitted(decision.node, decision.devices)
        if over:
            refused.append(f"{p['metadata']['name']}: {', '.join(over)}")
    return placed, refused


@settings(max_examples=300, deadline=None)
@given(situation())
def test_bind_accepts_every_card_filter_chose(case: tuple[dict[str, Any], list[Any]]) -> None:
    node_obj, pods = case
    assert placed_and_rechecked(node_obj, pods)[1] == []


@pytest.mark.parametrize("kind", ASCEND)
def test_an_ascend_soft_split_pod_past_the_registered_cores_binds(kind: str) -> None:
    """30 % of a card's cores on the soft split, where the card registered 20 (8 for the
    310P), twice: both placed on one NPU (HAMi counts 100 there) and both accepted."""
    family = FAMILIES.by_type()[kind]
    names = family.wire.resources
    ask = {names.count: "1", names.memory: "1024", names.cores: "30"}
    pods = [
        {
            "metadata": {
                "name": f"p{i}",
                "namespace": "ns",
                "uid": f"uid-p{i}",
                "annotations": {MODE_ANNOTATION: SOFT},
            },
            "spec": {"containers": [{"name": "c", "resources": {"limits": ask}}]},
            "status": {"phase": "Pending"},
        }
        for i in range(2)
    ]
    assert placed_and_rechecked(node(family, soft=True), pods) == (2, [])
