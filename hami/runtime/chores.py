"""The running process's background chores: what keeps time, memory and reservations in order."""

import asyncio
import contextlib
import gc
import logging
from collections.abc import Awaitable, Callable, Sequence

from prometheus_client import Counter, Histogram

from hami.cache.store import ClusterCache
from hami.kube.informer import Informer

log = logging.getLogger(__name__)

# Container allocations between young-generation collections once the heap is frozen (Python's
# default is 700). A pod's events, requests and writes allocate thousands, nearly all freed by
# reference counting within the request: at 700 the collector took 3.5 % of our CPU in a burst
# (perf), scanning what was about to go anyway; 0.7 % at this threshold.
YOUNG_THRESHOLD = 10_000


async def loop_lag(histogram: Histogram, stop: asyncio.Event, interval: float = 0.5) -> None:
    """How late the event loop runs a timer, into `histogram`, until `stop`."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        start = loop.time()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
        histogram.observe(max(0.0, loop.time() - start - interval))


async def freeze_heap(
    informers: Sequence[Informer],
    cache: ClusterCache,
    warm: Callable[[], Awaitable[object]] | None = None,
) -> None:
    """Once the cache has synced, take what start-up built out of the collector's view.

    A full collection scans every tracked object, so with the cache of a large cluster it
    holds the loop for tens of milliseconds or more. Frozen objects are still freed by
    reference counting when the cache drops them; only what is built afterwards is scanned.

    Until then the cyclic collector is off: the first list builds the cache's objects by the
    hundred thousand, none of them in a cycle, and the collector would scan the growing heap
    again and again (half of the list's CPU at 20,000 pods). Nor is there a full collection
    before the freeze: at 30,000 pods it found 85 objects in cycles for 0.2 s of the loop
    held, about a second at 150,000; those few stay frozen.

    `warm`, awaited once the cache is settled and before the freeze, builds what the first
    scrape would (every card's series, kept between scrapes): at 5,000 nodes the first scrape
    cost 770 ms of CPU against 60 for the later ones, and what it builds is then frozen too.
    """
    gc.disable()
    try:
        await asyncio.gather(*(i.synced.wait() for i in informers))
        cache.settle()  # every node built once, by the list, not by the first filter
        if warm is not None:
            try:
                await warm()
            except Exception:  # the scrape builds it then; the freeze must still happen
                log.exception("building the first scrape at start failed")
        _freeze()
    finally:
        gc.enable()
    log.info("start-up heap frozen", extra={"objects": gc.get_freeze_count()})


def freeze(cache: ClusterCache) -> None:
    """What freeze_heap does once synced; the bench server calls it too, so that its figures
    are those of a serving process (a full collection over an unfrozen cache shows in the
    p99 of /filter)."""
    cache.settle()
    _freeze()


def _freeze() -> None:
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])


async def expire(
    cache: ClusterCache, expired: Counter, stop: asyncio.Event, interval: float = 5.0
) -> None:
    """Drop decisions no bind took up, every `interval` seconds until `stop`."""
    while not stop.is_set():
        for res in cache.expire():
            expired.inc()
            log.warning(
                "reservation expired without a bind",
                extra={"namespace": res.namespace, "pod": res.name, "node": res.node},
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
