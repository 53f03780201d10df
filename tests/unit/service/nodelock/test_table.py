"""NodeLocks: the one copy of each node's lock; a bind waiting for a lock wakes on the watch's
release, not on a timer, and the cache hears when the pod a lock names changes."""

import asyncio

from hami.service.nodelock.table import NodeLocks
from hami.service.nodelock.wire import lock_keys
from tests.builders import FAMILIES


def node(name: str, lock: str | None, version: str = "") -> dict[str, object]:
    annotations = {"hami.io/mutex.lock": lock} if lock else {}
    return {"metadata": {"name": name, "annotations": annotations, "resourceVersion": version}}


async def test_a_waiter_wakes_when_the_lock_it_met_is_released() -> None:
    locks = NodeLocks(recheck=30, keys=lock_keys(FAMILIES))
    locks.seen(node("n", "t1,ns,a"))
    loop = asyncio.get_running_loop()
    started = loop.time()
    waiter = asyncio.create_task(locks.changed("n", "t1,ns,a", 30))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    locks.seen(node("other", None))  # another node's update wakes nobody here
    await asyncio.sleep(0)
    assert not waiter.done()
    locks.seen(node("n", None))
    await asyncio.wait_for(waiter, 1)
    assert loop.time() - started < 1
    assert locks.value("n") is None


async def test_a_change_the_waiter_missed_returns_at_once_and_a_silent_watch_rechecks() -> None:
    locks = NodeLocks(recheck=0.05, keys=lock_keys(FAMILIES))
    locks.seen(node("n", "t2,ns,b"))
    await asyncio.wait_for(locks.changed("n", "t1,ns,a", 30), 0.01)  # already another value
    loop = asyncio.get_running_loop()
    started = loop.time()
    await locks.changed("n", "t2,ns,b", 30)  # nothing happens: back after `recheck`
    assert 0.04 < loop.time() - started < 1
    locks.gone(node("n", None))
    assert locks.value("n") is None
    locks.seen(node("a", "x"))
    assert locks.value("a") == "x"


def test_the_holder_is_read_once_and_its_changes_are_told() -> None:
    locks = NodeLocks(keys=lock_keys(FAMILIES))
    moved: list[str] = []
    locks.listen(moved.append)
    locks.seen(node("n", "2026-08-21T10:00:00Z,ns,a", "5"))
    assert locks.holder("n") == ("ns", "a") and moved == ["n"]
    locks.seen(node("n", "2026-08-21T10:00:01Z,ns,a", "6"))  # the same pod, taken again
    assert moved == ["n"]
    locks.seen(node("n", "2026-08-21T10:00:00Z,ns,b", "4"))  # older than what is known: dropped
    assert locks.holder("n") == ("ns", "a")
    locks.seen(node("n", "2026-08-21T10:00:00Z", "7"))  # a legacy lock names nobody
    assert locks.holder("n") is None and moved == ["n", "n"]


def test_a_lock_this_process_wrote_is_marked_until_it_changes() -> None:
    locks = NodeLocks(keys=lock_keys(FAMILIES))
    ours = node("n", "2026-08-21T10:00:00Z,ns,a", "5")
    locks.written(ours, at=12.0)
    assert locks.written_at("n") == 12.0
    locks.seen(node("n", "2026-08-21T10:00:00Z,ns,a", "6"))  # the watch shows the same lock
    assert locks.written_at("n") == 12.0
    locks.seen(node("n", None, "7"))
    assert locks.written_at("n") is None


async def test_a_familys_own_lock_is_kept_beside_hamis_and_wakes_its_own_waiters() -> None:
    own, hami, bare = (
        "cambricon.com/dsmlu.lock",
        "2026-08-21T10:00:00Z,ns,a",
        "2026-08-21T10:00:00Z",
    )
    locks = NodeLocks(recheck=30, keys=lock_keys(FAMILIES))
    both = node("n", hami, "5")
    both["metadata"]["annotations"][own] = bare  # type: ignore[index]
    locks.seen(both)
    assert (locks.value("n"), locks.value("n", own)) == (hami, bare)
    assert locks.holder("n") == ("ns", "a")  # the pod HAMi's lock names; the other names none
    assert locks.node("n", own) == {
        "metadata": {"name": "n", "resourceVersion": "5", "annotations": {own: bare}}
    }
    waiter = asyncio.create_task(locks.changed("n", bare, 30, own))
    locks.seen(node("n", hami, "6"))  # the family's plugin removed its lock: HAMi's stays
    await asyncio.wait_for(waiter, 1)
    assert (locks.value("n"), locks.value("n", own)) == (hami, None)


def test_the_nodes_whose_hami_lock_is_held_are_counted() -> None:
    locks = NodeLocks(keys=lock_keys(FAMILIES))
    locks.seen(node("a", "t1,ns,a"))
    locks.seen(node("b", "t1,ns,b"))
    locks.seen(node("c", None))
    assert locks.held() == 2
    locks.seen(node("a", "t2,ns,c"))  # handed on: still one
    locks.seen(node("b", None))
    assert locks.held() == 1
    locks.gone(node("a", None))
    assert locks.held() == 0
    # A family's own lock is not HAMi's: the next bind waits for it only where it asks for it.
    family = NodeLocks(keys=("hami.io/mutex.lock", "cambricon.com/dsmlu.lock"))
    family.seen({"metadata": {"name": "n", "annotations": {"cambricon.com/dsmlu.lock": "t1"}}})
    assert family.held() == 0


def test_how_long_a_lock_stays_is_averaged_over_the_last_ones() -> None:
    now = [0.0]
    locks = NodeLocks(clock=lambda: now[0], keys=lock_keys(FAMILIES))
    assert locks.hold == 0.0  # nothing seen yet
    locks.seen(node("a", "t1,ns,a"))
    now[0] = 4.0
    locks.seen(node("a", "t2,ns,b"))  # handed on after 4 s
    assert locks.hold == 4.0
    now[0] = 12.0
    locks.seen(node("a", None))  # released after 8 s
    assert locks.hold == 4.0 + (8.0 - 4.0) / 8
    locks.seen(node("b", "t3,ns,c"))
    now[0] = 10_000.0
    locks.gone(node("b", None))  # kept for a pod that never got its devices: capped
    assert locks.hold < 12.0
