"""A decision's cards stay counted from filter until the watch shows its pod, however long the
watch takes once a bind has taken the decision up (hami.cache.reservations)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.cache.freshness import Freshness, Limits, limits
from hami.cache.store import ClusterCache
from hami.engine.model import ContainerDevice, Usage
from hami.engine.requests import ResourceDefaults
from tests.builders import FAMILIES, registered_node, t4s

from .test_store import Clock, pending, pod, usage

CARD = ((ContainerDevice("GPU-0", 15360, 0),),)


def placed(clock: Clock, *, known: bool = False) -> ClusterCache:
    cache = ClusterCache(
        clock,
        reservation_ttl=120,
        unknown_pod_ttl=5,
        families=FAMILIES,
        resources=ResourceDefaults(),
    )
    cache.replace_nodes([registered_node("n", t4s(2))])
    if known:
        cache.upsert_pod(pending("a"))
    cache.reserve("a", "ns", "a", "n", CARD, 0)
    return cache


def test_a_decision_no_bind_took_up_expires() -> None:
    clock = Clock()
    cache = placed(clock)
    clock.now = 5
    assert [r.uid for r in cache.expire()] == ["a"]
    assert usage(cache, "GPU-0") == Usage()


def test_a_bind_under_way_holds_its_cards_past_every_ttl() -> None:
    clock = Clock()
    cache = placed(clock)
    cache.binds.started("a")
    clock.now = 10_000
    assert cache.expire() == []
    assert usage(cache, "GPU-0") == Usage(1, 15360, 0)


def test_a_landed_bind_counts_until_the_watch_shows_the_pod_with_no_ttl() -> None:
    clock = Clock()
    cache = placed(clock)
    cache.binds.started("a")
    cache.binds.landed("a")
    assert cache.binds.unconfirmed_since() == 0.0
    clock.now = 10_000  # the watch stalls for hours
    assert cache.expire() == []
    assert usage(cache, "GPU-0") == Usage(1, 15360, 0)
    # A queued event from before the Binding (no allocation yet) keeps it counted.
    cache.upsert_pod(pending("a"))
    assert usage(cache, "GPU-0") == Usage(1, 15360, 0)
    cache.upsert_pod(pod("a", "GPU-0", 15360))
    assert cache.reservation("a") is None
    assert cache.binds.unconfirmed_since() is None
    assert usage(cache, "GPU-0") == Usage(1, 15360, 0)


def test_a_landed_bind_of_a_pod_deleted_meanwhile_is_dropped_by_the_delete() -> None:
    clock = Clock()
    cache = placed(clock)
    cache.binds.landed("a")
    cache.delete_pod(pending("a"))
    assert usage(cache, "GPU-0") == Usage()
    assert cache.binds.unconfirmed_since() is None


def test_a_failed_bind_gives_the_decision_its_ttl_back() -> None:
    clock = Clock()
    cache = placed(clock, known=True)
    cache.binds.started("a")
    clock.now = 200
    cache.binds.failed("a")
    clock.now = 319
    assert cache.expire() == []
    clock.now = 320
    assert [r.uid for r in cache.expire()] == ["a"]


def test_a_relist_settles_landed_binds_the_watch_never_showed() -> None:
    clock = Clock()
    cache = ClusterCache(clock, families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])
    for uid, card in (("gone", "GPU-0"), ("unbound", "GPU-1"), ("late", "GPU-1")):
        cache.reserve(uid, "ns", uid, "n", ((ContainerDevice(card, 1000, 0),),), 0)
    cache.binds.landed("gone")  # created, bound and deleted while the watch was cut
    cache.binds.landed("unbound")  # its outcome was unknown: the Binding did not land
    cache.binds.relisting()
    cache.binds.landed("late")  # landed after the list's snapshot may have been taken
    cache.upsert_pod(pending("unbound"))
    cache.binds.relisted()
    assert cache.reservation("gone") is None
    assert cache.reservation("unbound") is None
    assert cache.reservation("late") is not None
    assert usage(cache, "GPU-0") == Usage()
    assert usage(cache, "GPU-1") == Usage(1, 1000, 0)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["reserve", "start", "land", "fail", "expire", "relist"]),
            st.integers(0, 3),
            st.floats(0, 50),
        ),
        max_size=40,
    )
)
def test_no_bind_that_may_have_landed_is_ever_uncounted_by_time(
    steps: list[tuple[str, int, float]],
) -> None:
    """Whatever the order and timing, a reservation whose bind started or landed is only ever
    dropped by a relist that began after it landed, never by the clock."""
    clock = Clock()
    cache = ClusterCache(
        clock,
        reservation_ttl=30,
        unknown_pod_ttl=5,
        families=FAMILIES,
        resources=ResourceDefaults(),
    )
    cache.replace_nodes([registered_node("n", t4s(2))])
    landed: dict[str, int] = {}  # uid -> relists begun before it landed
    relists = 0
    for action, i, dt in steps:
        uid = f"p{i}"
        clock.now += dt
        if action == "reserve":
            cache.reserve(uid, "ns", uid, "n", ((ContainerDevice("GPU-0", 100, 0),),), 0)
            landed.pop(uid, None)
        elif action == "start":
            cache.binds.started(uid)
        elif action == "land" and cache.reservation(uid) is not None:
            cache.binds.landed(uid)
            landed[uid] = relists
        elif action == "fail":
            cache.binds.failed(uid)
            landed.pop(uid, None)
        elif action == "expire":
            expired = {r.uid for r in cache.expire()}
            assert not expired & set(landed)
        else:
            cache.binds.relisting()
            relists += 1
            cache.binds.relisted()
            landed = {u: n for u, n in landed.items() if n >= relists}
        for u in landed:
            assert cache.reservation(u) is not None


def test_freshness_bounds_silence_and_lag() -> None:
    clock = Clock()
    contact: dict[str, float | None] = {"pods": 0.0, "nodes": None}
    unconfirmed: list[float | None] = [None]
    fresh = Freshness(
        [("pods", lambda: contact["pods"]), ("nodes", lambda: contact["nodes"])],
        lambda: unconfirmed[0],
        Limits(silence=95.0, lag=10.0),
        clock,
    )
    assert fresh.staleness() == float("inf")  # nodes never listed
    assert fresh.blind() is None  # not synced is said elsewhere
    contact["nodes"] = 0.0
    clock.now = 95
    assert fresh.blind() is None
    clock.now = 96
    assert "pods watch has not heard from the API server for 96s" in (fresh.blind() or "")
    contact["pods"] = contact["nodes"] = 96.0
    unconfirmed[0] = 90.0
    clock.now = 100
    assert fresh.blind() is None
    assert fresh.lag() == 10.0
    clock.now = 100.5
    assert "bound 10s ago has not shown up on the pods watch" in (fresh.blind() or "")
    assert limits(60, 5, 10) == Limits(silence=95.0, lag=10.0)


def test_a_node_made_again_under_its_name_survives_the_old_ones_delete() -> None:
    """A relist upserts the new Node, then deletes the old uid it no longer lists."""
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    old, new = registered_node("n", t4s(2)), registered_node("n", t4s(2))
    old["metadata"]["uid"], new["metadata"]["uid"] = "uid-1", "uid-2"
    cache.upsert_node(old)
    cache.upsert_node(new)
    assert cache.delete_node({"metadata": {"name": "n", "uid": "uid-1"}}) is False
    assert "n" in cache.view
    assert cache.delete_node({"metadata": {"name": "n", "uid": "uid-2"}}) is True
    assert "n" not in cache.view


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["reserve", "forget", "expire", "start", "land", "fail"]),
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from(["n", "m"]),
        ),
        max_size=30,
    )
)
def test_the_reservations_per_node_follow_every_reservation(
    steps: list[tuple[str, str, str]],
) -> None:
    """Kept as reservations come and go (placement reads it on every filter under contention),
    the count per node always equals a count of the reservations held."""
    clock = Clock()
    cache = ClusterCache(
        clock,
        reservation_ttl=120,
        unknown_pod_ttl=5,
        families=FAMILIES,
        resources=ResourceDefaults(),
    )
    cache.replace_nodes([registered_node("n", t4s(2)), registered_node("m", t4s(2))])
    for what, uid, node in steps:
        clock.now += 2
        if what == "reserve":
            cache.reserve(uid, "ns", uid, node, CARD, 0)
        elif what == "forget":
            cache.forget(uid)
        elif what == "expire":
            cache.expire()
        elif cache.reservation(uid) is not None:
            {"start": cache.binds.started, "land": cache.binds.landed, "fail": cache.binds.failed}[
                what
            ](uid)
        held = [r for u in "abc" if (r := cache.reservation(u)) is not None]
        expected: dict[str, int] = {}
        for r in held:
            expected[r.node] = expected.get(r.node, 0) + 1
        assert dict(cache.reserved_nodes()) == expected
