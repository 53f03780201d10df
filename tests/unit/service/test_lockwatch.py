"""LockWatch: a bind waiting for a node lock wakes on the watch's release, not on a timer."""

import asyncio

from hami.service.lockwatch import LockWatch


def node(name: str, lock: str | None) -> dict[str, object]:
    annotations = {"hami.io/mutex.lock": lock} if lock else {}
    return {"metadata": {"name": name, "annotations": annotations}}


async def test_a_waiter_wakes_when_the_lock_it_met_is_released() -> None:
    locks = LockWatch(recheck=30)
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
    locks = LockWatch(recheck=0.05)
    locks.seen(node("n", "t2,ns,b"))
    await asyncio.wait_for(locks.changed("n", "t1,ns,a", 30), 0.01)  # already another value
    loop = asyncio.get_running_loop()
    started = loop.time()
    await locks.changed("n", "t2,ns,b", 30)  # nothing happens: back after `recheck`
    assert 0.04 < loop.time() - started < 1
    locks.gone(node("n", None))
    assert locks.value("n") is None
    assert [n["metadata"]["name"] for n in locks.tap([node("a", "x"), node("b", None)])] == [
        "a",
        "b",
    ]
    assert locks.value("a") == "x"
