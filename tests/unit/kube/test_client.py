"""Failure paths of the client and informer that the real API server cannot be made to produce
on demand (stalls, refused connections, a 410 in the middle of a watch), driven through a small
fake server speaking the same HTTP. Everything else runs against the real API server in
tests/e2e/test_kube_io.py.
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio.client import ApiClient, Configuration
from pytest_aiohttp import AiohttpServer

from hami.kube.client import Kube
from hami.kube.errors import Unavailable
from hami.kube.informer import Informer

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Serve = Callable[[dict[str, Handler]], Awaitable[Kube]]


@pytest.fixture
async def serve(aiohttp_server: AiohttpServer) -> AsyncIterator[Serve]:
    clients: list[Kube] = []

    async def start(routes: dict[str, Handler]) -> Kube:
        app = web.Application()
        for path, handler in routes.items():
            app.router.add_get(path, handler)
        server = await aiohttp_server(app)
        kube = Kube(
            ApiClient(Configuration(host=str(server.make_url("")).rstrip("/"))), timeout=0.3
        )
        clients.append(kube)
        return kube

    yield start
    for kube in clients:
        await kube.close()


async def test_a_stalled_request_times_out(serve: Serve) -> None:
    async def stall(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.json_response({})

    kube = await serve({"/api/v1/namespaces/ns/pods/p": stall})
    with pytest.raises(Unavailable, match="get pod ns/p"):
        await kube.get_pod("ns", "p")


async def test_too_many_requests_carries_retry_after(serve: Serve) -> None:
    async def busy(request: web.Request) -> web.Response:
        body = {"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow down"}
        return web.json_response(body, status=429, headers={"Retry-After": "2"})

    kube = await serve({"/api/v1/nodes/n1": busy})
    with pytest.raises(Unavailable) as caught:
        await kube.get_node("n1")
    assert caught.value.retry_after == 2.0
    assert caught.value.status == 429


async def test_refused_connection_is_unavailable(unused_tcp_port: int) -> None:
    kube = Kube(ApiClient(Configuration(host=f"http://127.0.0.1:{unused_tcp_port}")), timeout=2)
    try:
        with pytest.raises(Unavailable):
            await kube.get_node("n1")
    finally:
        await kube.close()


async def test_a_silent_watch_is_abandoned(serve: Serve) -> None:
    async def silent(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        await asyncio.sleep(5)
        return resp

    kube = await serve({"/api/v1/nodes": silent})
    with pytest.raises(Unavailable, match="watch nodes"):
        async for _ in kube.watch_objects("nodes", "1", timeout_seconds=300, inactivity=0.2):
            pass


def pod(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": rv}}


class Recorder:
    def __init__(self) -> None:
        self.replaced: list[list[str]] = []
        self.names: set[str] = set()

    def replace(self, objects: list[dict[str, Any]]) -> None:
        self.replaced.append([o["metadata"]["name"] for o in objects])
        self.names = {o["metadata"]["name"] for o in objects}

    def upsert(self, obj: dict[str, Any]) -> None:
        self.names.add(obj["metadata"]["name"])

    def delete(self, obj: dict[str, Any]) -> None:
        self.names.discard(obj["metadata"]["name"])


async def test_a_410_mid_watch_relists_and_drops_what_vanished(serve: Serve) -> None:
    lists = [([pod("a", "10")], "10"), ([pod("b", "20")], "20")]
    watched_from: list[str] = []

    async def pods(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch", "").lower() != "true":
            items, rv = lists.pop(0)
            return web.json_response({"items": items, "metadata": {"resourceVersion": rv}})
        watched_from.append(request.query["resourceVersion"])
        resp = web.StreamResponse()
        await resp.prepare(request)
        if len(watched_from) == 1:
            gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
            await resp.write(orjson.dumps({"type": "ERROR", "object": gone}) + b"\n")
            return resp
        await asyncio.sleep(5)
        return resp

    kube = await serve({"/api/v1/pods": pods})
    sink = Recorder()
    informer = Informer(kube, "pods", sink, inactivity=10)
    stop = asyncio.Event()
    task = asyncio.create_task(informer.run(stop))
    for _ in range(100):
        if len(watched_from) == 2:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 2)
    assert sink.replaced == [["a"], ["b"]]
    assert sink.names == {"b"}
    assert watched_from == ["10", "20"]
    assert informer.synced.is_set()


class Picky(Recorder):
    def upsert(self, obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] == "bad":
            raise ValueError("cache bug")
        super().upsert(obj)


async def test_a_cache_error_on_one_event_does_not_stall_the_rest(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    async def pods(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch", "").lower() != "true":
            return web.json_response({"items": [], "metadata": {"resourceVersion": "1"}})
        resp = web.StreamResponse()
        await resp.prepare(request)
        for name, rv in (("bad", "2"), ("good", "3")):
            await resp.write(orjson.dumps({"type": "ADDED", "object": pod(name, rv)}) + b"\n")
        await asyncio.sleep(5)
        return resp

    kube = await serve({"/api/v1/pods": pods})
    sink = Picky()
    informer = Informer(kube, "pods", sink)
    stop = asyncio.Event()
    task = asyncio.create_task(informer.run(stop))
    for _ in range(100):
        if "good" in sink.names:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 2)
    assert sink.names == {"good"}
    assert informer.resource_version == "3"
    rejected = [r for r in caplog.records if r.getMessage() == "cache rejected a watch event"]
    assert len(rejected) == 1
    assert rejected[0].__dict__["object"] == "bad"
