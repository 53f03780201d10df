"""The worst bodies a client can send the webhook are answered, and other requests with them.

The webhook is the one port anyone on the pod network can reach. While the worst inputs we
know of arrive (a GPU count of two billion in standalone mode, thousands of containers, a pod
of several MiB, deep nesting, a huge annotation), each is answered as it should be and a second
client's /healthz is answered throughout. How long each holds the event loop is a figure of
`python -m tests.bench.stalls`, not a bound here: a loaded machine stalls any loop.
"""

import asyncio
import io

import orjson
from aiohttp import web
from pytest_aiohttp import AiohttpClient

import hami.webhook.routes
from hami.runtime.bodies import MAX_BODY
from hami.service.admission import AdmissionService
from tests.unit.webhook.worst import STANDALONE, worst


async def test_worst_inputs_are_answered_and_healthz_throughout(
    aiohttp_client: AiohttpClient,
) -> None:
    app = web.Application(client_max_size=MAX_BODY)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.add_routes([web.get("/healthz", healthz)])
    app.add_routes(hami.webhook.routes.routes(AdmissionService(STANDALONE), lambda *_: None))
    client = await aiohttp_client(app)
    stop = asyncio.Event()
    answered: list[int] = []

    async def probe() -> None:
        while not stop.is_set():
            async with client.get("/healthz") as r:
                answered.append(r.status)
            await asyncio.sleep(0.01)

    task = asyncio.create_task(probe())
    for what, body, admitted in worst():
        async with client.post("/webhook", data=io.BytesIO(body)) as r:
            assert r.status == 200, what
            answer = orjson.loads(await r.read())["response"]
        assert answer["allowed"] is admitted, (what, answer)
    stop.set()
    await task
    assert answered and set(answered) == {200}
