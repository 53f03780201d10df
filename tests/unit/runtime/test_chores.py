"""hami.runtime.chores.freeze_heap: the start-up heap taken out of the collector's view."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from hami.runtime.chores import freeze_heap


class Listed:
    """All freeze_heap reads of an informer: whether it has listed."""

    def __init__(self) -> None:
        self.synced = asyncio.Event()


class Settled:
    def __init__(self) -> None:
        self.settled = 0

    def settle(self) -> None:
        self.settled += 1


async def test_the_heap_is_frozen_at_the_first_sync_without_a_full_pass() -> None:
    """A full pass over the cache of a large cluster would hold the loop for a second."""
    informers = [Listed(), Listed()]
    cache = Settled()
    full_passes: list[dict[str, Any]] = []

    def watch(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 2:
            full_passes.append(info)

    thresholds = gc.get_threshold()
    task = asyncio.create_task(freeze_heap(informers, cache))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert not gc.isenabled(), "off while the first list builds the cache"
    for informer in informers:
        informer.synced.set()
    gc.callbacks.append(watch)
    try:
        await task
        # Afterwards the young generation is collected far less often than Python's 700.
        assert gc.get_threshold()[0] >= 10_000
    finally:
        gc.callbacks.remove(watch)
        gc.unfreeze()
        gc.set_threshold(*thresholds)
    assert cache.settled == 1
    assert gc.isenabled()
    assert full_passes == []


async def test_what_warm_builds_is_made_after_the_settle_and_frozen_with_the_cache() -> None:
    """The first scrape's series, built at start instead, are kept as long as the cache's."""
    informers = [Listed()]
    cache = Settled()
    seen: dict[str, Any] = {}
    built: list[list[int]] = []

    async def warm() -> None:
        seen["settled"] = cache.settled
        seen["frozen"] = gc.get_freeze_count()
        built.extend([] for _ in range(5000))

    thresholds = gc.get_threshold()
    task = asyncio.create_task(freeze_heap(informers, cache, warm))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert seen == {}, "nothing is warmed before the cache has listed"
    informers[0].synced.set()
    try:
        await task
        assert seen["settled"] == 1
        assert gc.get_freeze_count() - seen["frozen"] >= len(built)
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
