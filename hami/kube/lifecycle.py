"""Running a background loop until the process is asked to stop."""

import asyncio
from collections.abc import Coroutine
from typing import Any


async def run_until(stop: asyncio.Event, work: Coroutine[Any, Any, None], name: str) -> None:
    """Run `work` until it ends or `stop` is set, then cancel it and wait for it to unwind."""
    worker = asyncio.create_task(work, name=name)
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({worker, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        worker.cancel()
        stopped.cancel()
        await asyncio.gather(worker, stopped, return_exceptions=True)
