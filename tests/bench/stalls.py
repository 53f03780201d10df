"""`python -m tests.bench.stalls`: how long the worst work we know of holds the event loop.

Two figures, printed rather than asserted (a loaded machine stalls any loop, so a bound in a
test fails for the machine's sake, not the code's):

* the webhook, while the worst bodies a client can send arrive (tests/unit/webhook/test_worst_inputs.py
  checks what they are answered): per input, the longest stall of a 5 ms ticker on the same
  loop during each of three sends, and of those the shortest;
* /metrics of 1,000 nodes x 8 cards, 90 % full (135,000 lines, which once took the loop for
  2.4 s): the longest stall per scrape, of three scrapes.

Work that blocks the loop does so every time, while a busy host's hiccups rarely hit all three
sends, hence the shortest of three. Both stay well under 50 ms on a quiet machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import logging
from collections.abc import AsyncIterator
from typing import cast

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

import hami.webhook.routes
from hami.bench.cluster import build_filled_cluster
from hami.runtime.app import Runtime
from hami.runtime.apps import metrics_app
from hami.runtime.bodies import MAX_BODY
from hami.runtime.metrics import Metrics
from hami.service.admission import AdmissionService
from tests.unit.webhook.worst import STANDALONE, worst

TICK = 0.005


@contextlib.asynccontextmanager
async def ticking() -> AsyncIterator[list[float]]:
    """How late each tick of a TICK-second ticker on this loop ran, while the block runs."""
    loop = asyncio.get_running_loop()
    late: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            before = loop.time()
            await asyncio.sleep(TICK)
            late.append(loop.time() - before - TICK)

    task = asyncio.create_task(ticker())
    try:
        yield late
    finally:
        done.set()
        await task


async def webhook_stalls() -> dict[str, float]:
    app = web.Application(client_max_size=MAX_BODY)
    app.add_routes(hami.webhook.routes.routes(AdmissionService(STANDALONE), lambda *_: None))
    client = TestClient(TestServer(app))
    await client.start_server()
    bodies = list(worst())  # encoded before the ticker starts: only the server's work is timed
    stall: dict[str, float] = {}
    try:
        for what, body, _ in bodies:
            stalls = []
            for _ in range(3):
                async with ticking() as late, client.post("/webhook", data=io.BytesIO(body)) as r:
                    await r.read()
                stalls.append(max(late, default=0.0))
            stall[what] = min(stalls)
    finally:
        await client.close()
    return stall


async def scrape_stalls() -> tuple[int, list[float]]:
    metrics = Metrics(build_filled_cluster(1000, 8, seed=7), lambda: 0.0, lambda: 0)
    runtime = cast(Runtime, type("Rt", (), {"metrics": metrics})())
    client = TestClient(TestServer(metrics_app(runtime)))
    await client.start_server()
    stalls: list[float] = []
    size = 0
    try:
        for _ in range(3):
            async with ticking() as late, client.get("/metrics") as r:
                size = len(await r.read())
            stalls.append(max(late, default=0.0))
    finally:
        await client.close()
    return size, stalls


def main() -> int:
    logging.basicConfig(level=logging.ERROR)  # the webhook's warnings about the worst bodies
    # hami serve freezes its start-up heap after its first sync (hami.runtime.app); without
    # that, a full collection would scan everything the bench holds.
    gc.freeze()
    webhook_figures = asyncio.run(webhook_stalls())
    size, scrapes = asyncio.run(scrape_stalls())
    print("webhook, longest loop stall per worst input (shortest of 3 sends):")
    for what, seconds in webhook_figures.items():
        print(f"  {what:<20} {seconds * 1000:7.1f} ms")
    print(
        f"/metrics of 1,000 nodes x 8 cards ({size / 2**20:.1f} MiB), longest stall per scrape: "
        + ", ".join(f"{s * 1000:.1f} ms" for s in scrapes)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
