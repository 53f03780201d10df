"""What a pod event costs the cache: a node's state is built when read, not per event, and
only its changed cards are scored again."""

import pytest

import hami.cache.nodes
from hami.cache.store import ClusterCache
from hami.engine.requests import ResourceDefaults
from hami.engine.state import build_node
from tests.builders import FAMILIES, registered_node, t4s
from tests.unit.cache.test_store import Clock, pod


def test_a_list_of_many_pods_on_one_node_builds_the_node_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    builds: list[str] = []

    def counted(name: str, *args: object, **kwargs: object) -> object:
        builds.append(name)
        return build_node(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(hami.cache.nodes, "build_node", counted)
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])
    builds.clear()
    cache.replace_pods([pod(f"p{i}", f"GPU-{i % 2}", 100) for i in range(40)])
    assert builds == []
    state = cache.view["n"]
    assert builds == ["n"]
    assert [c.usage.used for c in state.cards] == [20, 20]
    assert cache.view["n"] is state  # read again without a change: not built again


def test_a_pod_on_one_card_keeps_the_other_cards_as_they_were() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])
    cache.replace_pods([pod("a", "GPU-0"), pod("b", "GPU-1")])
    before = cache.view["n"].cards
    cache.upsert_pod(pod("c", "GPU-0"))
    after = cache.view["n"].cards
    assert after[0] is not before[0] and after[0].usage.used == 2
    assert after[1] is before[1]
