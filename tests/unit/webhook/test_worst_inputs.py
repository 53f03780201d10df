"""The worst bodies a client can send the webhook are answered, and other requests with them.

The webhook is the one port anyone on the pod network can reach. While the worst inputs we
know of arrive (a GPU count of two billion in standalone mode, thousands of containers, a pod
of several MiB, deep nesting, a huge annotation), each is answered as it should be and a second
client's /healthz is answered throughout. How long each holds the event loop is a figure of
`python -m tests.bench.stalls`, not a bound here: a loaded machine stalls any loop.
"""

import asyncio
import io
from collections.abc import Iterator
from typing import Any

import orjson
from aiohttp import web
from pytest_aiohttp import AiohttpClient

import hami.webhook.routes
from hami.engine.admission import AdmissionConfig
from hami.engine.injection import InjectionConfig, driver_profile
from hami.runtime.bodies import MAX_BODY
from hami.service.admission import AdmissionService
from tests.builders import FAMILIES

STANDALONE = AdmissionConfig(
    injection=InjectionConfig(
        mode="standalone",
        driver=driver_profile("gke", "", ""),
        hook_path="/home/kubernetes/bin/nvidia/vgpu",
    ),
    families=FAMILIES,
)


def review(pod: Any) -> bytes:
    return orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "operation": "CREATE",
                "namespace": "attack",
                "object": pod,
            },
        }
    )


def gpu(n: object = 1, **extra: Any) -> dict[str, Any]:
    return {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": n}}, **extra}


def pod(*containers: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", **metadata}, "spec": {"containers": list(containers)}}


def worst() -> Iterator[tuple[str, bytes, bool]]:
    """(what, body, whether it is admitted)."""
    yield "2e9 GPUs", review(pod(gpu(2_000_000_000))), False
    yield "1Ei GPUs", review(pod(gpu("1Ei"))), False
    yield "5000 containers", review(pod(*({**gpu(), "name": f"c{i}"} for i in range(5000)))), False
    many_env = [{"name": f"E{i}", "value": "v" * 20} for i in range(60_000)]
    yield "3 MiB of env", review(pod(gpu(env=many_env))), True
    # Deeper than orjson encodes, so spliced in as text.
    nested = b'{"a":' * 900 + b'"x"' + b"}" * 900
    body = review(pod(gpu(), annotations={"x": "NESTED"})).replace(b'"NESTED"', nested)
    yield "nested 900 deep", body, False
    yield "a 3 MiB annotation", review(pod(gpu(), annotations={"a": "x" * (3 * 2**20)})), True


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
