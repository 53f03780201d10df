"""The benchmarks' synthetic cluster in its DRA variant (hami.bench.cluster): the same cards,
also published as HAMi-DRA ResourceSlices under their UUIDs, and allocated claims holding what
the pods held, counted by the cache's DRA bookkeeper on the same cards."""

from hami.bench.cluster import build_cluster


def usage(dra: bool) -> dict[tuple[str, str], tuple[int, int]]:
    cache = build_cluster(20, 4, 120, 7, dra=dra)
    return {
        (node.name, c.info.id): (c.usage.used, c.usage.usedmem)
        for node in cache.view.values()
        for c in node.cards
    }


def test_claims_hold_on_each_card_what_the_pods_held() -> None:
    assert usage(dra=True) == usage(dra=False)
    assert sum(mem for _, mem in usage(dra=True).values()) == 120 * 1000


def test_every_card_is_published_and_no_pod_is_placed() -> None:
    cache = build_cluster(20, 4, 120, 7, dra=True)
    assert cache.dra.uuids() == {c.info.id for n in cache.view.values() for c in n.cards}
    assert len(cache.dra.devices()) == 80
    assert sum(len(cache.dra.claims_on(n)) for n in cache.view) == 120
    assert not list(cache.pods())
