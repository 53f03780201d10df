"""Small HTTP servers on 127.0.0.1 standing in for kube-apiserver where the real one cannot be
made to answer on demand (stalls, refusals, a 410 in the middle of a paged list), a client of
ours over each, and an informer run until a condition holds."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio.client import ApiClient, Configuration
from pytest_aiohttp import AiohttpServer

from hami.kube.client import Kube
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


def watch_forever() -> Handler:
    async def watch(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        await asyncio.sleep(5)
        return resp

    return watch


class Paged:
    """A LIST endpoint that serves `snapshots` in turn, each in pages of `per_page`, ignoring
    the client's limit as a server may; requests are recorded."""

    def __init__(self, snapshots: list[tuple[list[dict[str, Any]], str]], per_page: int) -> None:
        self.snapshots = snapshots
        self.per_page = per_page
        self.requests: list[dict[str, str]] = []
        self.expire: set[str] = set()  # continue tokens answered with 410
        self.watch = watch_forever()

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.requests.append(query)
        if is_watch(query):
            return await self.watch(request)
        token = query.get("continue", "")
        if token in self.expire:
            self.expire.discard(token)
            gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
            return web.json_response(gone, status=410)
        if not token:
            self.current = self.snapshots.pop(0)
        items, rv = self.current
        start = int(token or 0)
        end = start + self.per_page
        metadata = {"resourceVersion": rv, **({"continue": str(end)} if end < len(items) else {})}
        return web.json_response({"items": items[start:end], "metadata": metadata})

    def lists(self) -> list[dict[str, str]]:
        return [q for q in self.requests if not is_watch(q)]

    def watched_from(self) -> list[str]:
        return [q["resourceVersion"] for q in self.requests if is_watch(q)]


def is_watch(query: Mapping[str, str]) -> bool:
    return query.get("watch", "").lower() == "true"


async def run_until(informer: Informer, done: Callable[[], bool]) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(informer.run(stop))
    for _ in range(100):
        if done():
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 2)
