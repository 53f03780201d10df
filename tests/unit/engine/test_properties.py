"""Invariants over arbitrary sequences of pods placed and deleted through the filter service."""

from typing import Any

from hypothesis import given, settings

from hami.cache.store import ClusterCache
from hami.service.annotations import allocation_annotations
from tests.builders import FAMILIES
from tests.unit.engine.manifests import manifest
from tests.unit.engine.propcluster import check_capacity, cluster, ops


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
