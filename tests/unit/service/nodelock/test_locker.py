"""What placement and filter pacing read of the binds queued on node locks (issue 33)."""

import asyncio

from hami.engine import names
from hami.engine.model import ContainerDevice
from tests.builders import gpu_pod
from tests.unit.service.test_binding import HERE, NS, THERE, world


async def test_binds_waiting_on_a_lock_make_the_node_busy_and_hold_filters_until_they_pass() -> (
    None
):
    w = world(lock_wait=2.0)
    locker = w.binder.locker
    for name in ("q1", "q2"):
        w.api.add("pods", gpu_pod(name, NS))
        w.cache.reserve(f"uid-{name}", NS, name, HERE, ((ContainerDevice("GPU-1", 100, 0),),), 0)
    assert locker.busy(HERE) == 0
    await w.bind(name="q1")
    assert locker.busy(HERE) == 1  # its lock is held until the device plugin allocates
    second = asyncio.ensure_future(w.bind(name="q2"))
    await asyncio.sleep(0.05)
    assert locker.busy(HERE) == 2 and locker.busy(THERE) == 0
    held = asyncio.ensure_future(locker.room(1, 5.0))  # one bind waiting is one too many
    await asyncio.sleep(0.05)
    assert not held.done()
    released = w.api.edit(
        "nodes", HERE, lambda n: n["metadata"]["annotations"].pop(names.NODE_LOCK)
    )
    w.cache.upsert_node(released)
    await second
    await asyncio.wait_for(held, 1.0)  # the waiting bind took the lock: filters go on
    await locker.room(1, 0.0)
