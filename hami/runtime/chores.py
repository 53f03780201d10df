"""The running process's background chores: what keeps time, memory and reservations in order."""

import asyncio
import contextlib
import gc
import logging
from collections.abc import Sequence

from prometheus_client import Counter, Histogram

from hami.cache.store import ClusterCache
from hami.kube.informer import Informer

log = logging.getLogger(__name__)


async def loop_lag(histogram: Histogram, stop: asyncio.Event, interval: float = 0.5) -> None:
    """How late the event loop runs a timer, into `histogram`, until `stop`."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        start = loop.time()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
        histogram.observe(max(0.0, loop.time() - start - interval))


async def freeze_heap(informers: Sequence[Informer]) -> None:
    """Once the cache has synced, take what start-up built out of the collector's view.

    A full collection scans every tracked object, so with the cache of a large cluster it
    holds the loop for tens of milliseconds or more. Frozen objects are still freed by
    reference counting when the cache drops them; only what is built afterwards is scanned.
    The one full collection before the freeze happens right after the first sync, once.
    """
    await asyncio.gather(*(i.synced.wait() for i in informers))
    gc.collect()
    gc.freeze()
    log.info("start-up heap frozen", extra={"objects": gc.get_freeze_count()})


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
