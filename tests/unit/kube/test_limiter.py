"""The write limiter: never more than `limit` writes in flight, the most urgent served first."""

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.kube.limiter import Priority, WriteLimiter


async def test_waiters_are_served_by_priority_then_arrival() -> None:
    limiter = WriteLimiter(1)
    served: list[str] = []
    release_first = asyncio.Event()

    async def write(name: str, priority: Priority, hold: asyncio.Event | None = None) -> None:
        async with limiter.slot(priority):
            served.append(name)
            if hold is not None:
                await hold.wait()

    first = asyncio.create_task(write("event", Priority.ROUTINE, release_first))
    await asyncio.sleep(0)
    waiting = [
        asyncio.create_task(write(name, priority))
        for name, priority in (
            ("event-2", Priority.ROUTINE),
            ("lock", Priority.BIND_STEP),
            ("binding", Priority.BINDING),
            ("lock-2", Priority.BIND_STEP),
        )
    ]
    await asyncio.sleep(0)
    assert limiter.queued == 4 and limiter.in_flight == 1
    release_first.set()
    await asyncio.gather(first, *waiting)
    assert served == ["event", "binding", "lock", "lock-2", "event-2"]
    assert (limiter.in_flight, limiter.queued) == (0, 0)


async def test_a_waiter_that_gives_up_does_not_leak_its_slot() -> None:
    limiter = WriteLimiter(1)
    hold = asyncio.Event()

    async def holder() -> None:
        async with limiter.slot(Priority.ROUTINE):
            await hold.wait()

    task = asyncio.create_task(holder())
    await asyncio.sleep(0)

    async def waits() -> None:
        async with asyncio.timeout(0.01), limiter.slot(Priority.BINDING):
            raise AssertionError("the slot is held")

    with pytest.raises(TimeoutError):
        await waits()
    hold.set()
    await task
    async with asyncio.timeout(1):
        async with limiter.slot(Priority.ROUTINE):
            assert limiter.in_flight == 1
    assert limiter.in_flight == 0


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="never let a write through"):
        WriteLimiter(0)


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(1, 5),
    writes=st.lists(
        st.tuples(st.sampled_from(list(Priority)), st.integers(0, 3), st.booleans()),
        min_size=1,
        max_size=30,
    ),
)
def test_never_more_than_the_limit_in_flight(
    limit: int, writes: list[tuple[Priority, int, bool]]
) -> None:
    async def run() -> None:
        limiter = WriteLimiter(limit)
        peak = 0

        async def write(priority: Priority, ticks: int, gives_up: bool) -> None:
            nonlocal peak
            try:
                async with asyncio.timeout(0.001 if gives_up else None):
                    async with limiter.slot(priority):
                        peak = max(peak, limiter.in_flight)
                        assert limiter.in_flight <= limit
                        for _ in range(ticks):
                            await asyncio.sleep(0)
            except TimeoutError:
                pass

        await asyncio.gather(*(write(*w) for w in writes))
        assert peak <= limit
        assert (limiter.in_flight, limiter.queued) == (0, 0)

    asyncio.run(run())


async def test_room_waits_while_more_writes_wait_than_fit_in_flight() -> None:
    limiter = WriteLimiter(1)
    release = asyncio.Event()

    async def write() -> None:
        async with limiter.slot(Priority.ROUTINE):
            await release.wait()

    writes = [asyncio.create_task(write()) for _ in range(3)]  # one in flight, two waiting
    await asyncio.sleep(0)
    assert limiter.backed_up
    assert await limiter.room(0.01) is False
    waiting = asyncio.create_task(limiter.room(5))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    release.set()
    assert await waiting is True
    await asyncio.gather(*writes)
    assert await limiter.room(0) is True
