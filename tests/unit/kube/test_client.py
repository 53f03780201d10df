"""Paths of the client and informer that the real API server cannot be made to produce on
demand (stalls, refused connections, a 410 in the middle of a watch or a paged list, proxies),
driven through small servers speaking the same HTTP(S) on 127.0.0.1. Everything else runs
against the real API server in tests/e2e/test_kube_io.py.
"""

import asyncio
import base64
import contextlib
import gc
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from aiohttp import web
from kubernetes_asyncio.client import ApiClient, Configuration
from pytest_aiohttp import AiohttpServer

from hami.cache.store import ClusterCache
from hami.certs.selfsigned import issue_ca, issue_client, issue_serving
from hami.engine.requests import ResourceDefaults
from hami.kube.client import Kube
from hami.kube.connect import connect
from hami.kube.errors import Unavailable
from hami.kube.informer import Informer
from hami.kube.leader import NotLeading, Term
from hami.kube.limiter import WriteLimiter
from hami.kube.listwatch import LIST_PAGE
from tests.builders import FAMILIES
from tests.fakes.httpapi import Paged, Serve, run_until, serve

__all__ = ["serve"]  # the fixture, for pytest


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
    """Only what a list or watch of pods carries that the client reads: identity and
    resourceVersion."""
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": rv}}


class Recorder:
    def __init__(self, names: set[str] | None = None) -> None:
        self.replaced: list[list[str]] = []
        self.names: set[str] = set(names or ())
        self.deleted: list[dict[str, Any]] = []

    def replace(self, objects: list[dict[str, Any]]) -> None:
        self.replaced.append([o["metadata"]["name"] for o in objects])
        self.names = {o["metadata"]["name"] for o in objects}

    def upsert(self, obj: dict[str, Any]) -> None:
        self.names.add(obj["metadata"]["name"])

    def delete(self, obj: dict[str, Any]) -> None:
        self.names.discard(obj["metadata"]["name"])
        self.deleted.append(obj)


async def until(done: Callable[[], bool]) -> None:
    for _ in range(200):
        if done():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("not done within 10 s")


async def test_a_410_mid_watch_relists_and_drops_what_vanished(serve: Serve) -> None:
    """Also: each complete list is announced before and after (the cache settles the Bindings
    it wrote against it), and an accepted watch that stays silent is contact all the same."""
    lists = [([pod("a", "10")], "10"), ([pod("b", "20")], "20")]
    watched_from: list[str] = []
    order: list[str] = []
    ticks = iter(range(1000))

    async def pods(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch", "").lower() != "true":
            items, rv = lists.pop(0)
            order.append(f"list {rv}")
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
    informer = Informer(
        kube,
        "pods",
        sink,
        inactivity=10,
        clock=lambda: float(next(ticks)),
        relisting=lambda: order.append("relisting"),
        relisted=lambda: order.append(f"relisted, deleted {len(sink.deleted)}"),
    )
    await run_until(informer, lambda: len(watched_from) == 2)
    assert order == [
        "relisting", "list 10", "relisted, deleted 0",
        "relisting", "list 20", "relisted, deleted 1",
    ]  # fmt: skip
    # Ticks: list 10, its watch accepted, its ERROR event, list 20, the silent watch accepted.
    assert informer.last_event_monotonic == 4.0
    # The relist reconciles by upsert and delete: the sink never goes through an empty state.
    assert sink.replaced == [["a"]]
    assert sink.names == {"b"}
    assert [d["metadata"] for d in sink.deleted] == [
        {"uid": "a", "namespace": "ns", "name": "a", "resourceVersion": "10"}
    ]
    assert watched_from == ["10", "20"]
    assert informer.synced.is_set()


async def test_the_list_is_read_in_pages_and_watched_from_its_resource_version(
    serve: Serve,
) -> None:
    items = [pod(name, "7") for name in "abcde"]
    server = Paged([(items, "42")], per_page=2)
    kube = await serve({"/api/v1/pods": server})
    sink = Recorder({"left-over"})
    informer = Informer(kube, "pods", sink)
    await run_until(informer, lambda: bool(server.watched_from()))
    assert [(q.get("limit"), q.get("continue")) for q in server.lists()] == [
        (str(LIST_PAGE), None),
        (str(LIST_PAGE), "2"),
        (str(LIST_PAGE), "4"),
    ]
    # The first page takes the sink over (what it held is gone); later pages add to it.
    assert sink.replaced == [["a", "b"]]
    assert sink.names == set("abcde")
    assert server.watched_from() == ["42"]
    assert informer.synced.is_set()


async def test_the_next_page_is_asked_for_before_the_caller_reads_on(serve: Serve) -> None:
    """The server makes page n+1 while the informer takes page n in; a list left early drops
    the page asked for."""
    server = Paged([([pod(name, "7") for name in "abcde"], "42")], per_page=2)
    kube = await serve({"/api/v1/pods": server})
    pages = kube.list_pages("pods")
    items, _ = await anext(pages)
    assert [o["metadata"]["name"] for o in items] == ["a", "b"]
    for _ in range(100):
        if len(server.lists()) == 2:
            break
        await asyncio.sleep(0.01)
    assert [q.get("continue") for q in server.lists()] == [None, "2"]
    items, _ = await anext(pages)
    assert [o["metadata"]["name"] for o in items] == ["c", "d"]
    await pages.aclose()
    await asyncio.sleep(0)
    asked = [t for t in asyncio.all_tasks() if "ApiCalls._call" in repr(t.get_coro())]
    assert all(t.done() for t in asked)


async def test_an_expired_continue_token_relists_from_the_start(serve: Serve) -> None:
    first = [pod(name, "5") for name in "abcd"]
    second = [pod(name, "9") for name in "bcd"]
    server = Paged([(first, "5"), (second, "9")], per_page=2)
    server.expire = {"2"}
    kube = await serve({"/api/v1/pods": server})
    sink = Recorder()
    informer = Informer(kube, "pods", sink)
    await run_until(informer, lambda: bool(server.watched_from()))
    assert [q.get("continue") for q in server.lists()] == [None, "2", None, "2"]
    # "a" came with the page before the 410 and is gone from the list that completed.
    assert sink.names == set("bcd")
    assert [d["metadata"]["name"] for d in sink.deleted] == ["a"]
    assert server.watched_from() == ["9"]


def gpu_pod(name: str, rv: str, node: str) -> dict[str, Any]:
    """pod() with our allocation on `node`, as the watch shows a bound GPU pod."""
    obj = pod(name, rv)
    obj["metadata"]["annotations"] = {
        "hami.io/vgpu-node": node,
        "hami.io/vgpu-devices-allocated": "GPU-0,NVIDIA,1000,10:;",
    }
    obj["spec"] = {
        "nodeName": node,
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
    }
    return obj


class CacheSink:
    """The cache's pod methods, as `hami serve` wires them to its pod informer."""

    def __init__(self, cache: ClusterCache) -> None:
        self.replace = cache.replace_pods
        self.upsert = cache.upsert_pod
        self.delete = cache.delete_pod


async def test_the_cache_forgets_an_allocation_that_vanished_between_lists(serve: Serve) -> None:
    first = [gpu_pod("a", "3", "n1"), gpu_pod("b", "3", "n1"), gpu_pod("c", "3", "n1")]
    server = Paged([(first, "3"), (first[1:], "8")], per_page=2)
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    watches = 0

    async def watch(request: web.Request) -> web.StreamResponse:
        nonlocal watches
        watches += 1
        resp = web.StreamResponse()
        await resp.prepare(request)
        if watches == 1:
            await resp.write(orjson.dumps({"type": "ERROR", "object": gone}) + b"\n")
            return resp
        await asyncio.sleep(5)
        return resp

    server.watch = watch
    kube = await serve({"/api/v1/pods": server})
    cache = ClusterCache(clock=time.monotonic, families=FAMILIES, resources=ResourceDefaults())
    await run_until(Informer(kube, "pods", CacheSink(cache)), lambda: watches == 2)
    assert sorted(a.name for a in cache.pods()) == ["b", "c"]


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
    await run_until(informer, lambda: "good" in sink.names)
    assert sink.names == {"good"}
    assert informer.resource_version == "3"
    rejected = [r for r in caplog.records if r.getMessage() == "cache rejected an object"]
    assert len(rejected) == 1
    assert rejected[0].__dict__["object"] == "bad"


# --- connect: TLS from a kubeconfig, nothing from the environment ------------------------------


def _b64(pem: bytes) -> str:
    return base64.b64encode(pem).decode()


@dataclass(frozen=True)
class Seen:
    """A request as the server saw it: the client certificate's name and the headers."""

    client: str
    authorization: str | None
    headers: Mapping[str, str]


ApiServer = tuple[str, Callable[..., Path], list[Seen]]


@pytest.fixture
async def apiserver(aiohttp_server: AiohttpServer, tmp_path: Path) -> ApiServer:
    """An HTTPS server on 127.0.0.1 that wants a client certificate from the test CA, and a
    function writing a kubeconfig for it (extra cluster fields as keyword arguments)."""
    ca = issue_ca("test cluster CA", days=1)
    serving = issue_serving(ca, ["127.0.0.1"], days=1)
    user = issue_client(ca, "hami-test", days=1)
    for name, pem in (("ca.crt", ca.cert_pem), ("tls.crt", serving.cert_pem)):
        (tmp_path / name).write_bytes(pem)
    (tmp_path / "tls.key").write_bytes(serving.key_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=tmp_path / "ca.crt")
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    context.verify_mode = ssl.CERT_REQUIRED
    seen: list[Seen] = []

    async def node(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        names = dict(pair[0] for pair in (peer or {}).get("subject", ()))
        headers = request.headers
        seen.append(Seen(names.get("commonName", ""), headers.get("Authorization"), headers))
        return web.json_response({"metadata": {"name": request.match_info["name"]}})

    app = web.Application()
    app.router.add_get("/api/v1/nodes/{name}", node)
    server = await aiohttp_server(app, ssl=context)
    url = f"https://127.0.0.1:{server.port}"

    def kubeconfig(**cluster: str) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "c",
                    "cluster": {
                        "server": url,
                        "certificate-authority-data": _b64(ca.cert_pem),
                        **cluster,
                    },
                }
            ],
            "users": [
                {
                    "name": "u",
                    "user": {
                        "client-certificate-data": _b64(user.cert_pem),
                        "client-key-data": _b64(user.key_pem),
                    },
                }
            ],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        return path

    return url, kubeconfig, seen


async def test_connect_uses_the_kubeconfig_tls_and_nothing_from_the_environment(
    apiserver: ApiServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    unused_tcp_port: int,
    recwarn: pytest.WarningsRecorder,
) -> None:
    _, kubeconfig, seen = apiserver
    # Were the environment read, every call would go to a proxy that is not there, and carry
    # the netrc's credentials.
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{unused_tcp_port}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    kube = Kube(await connect(str(kubeconfig())))
    try:
        assert await kube.get_node("n1") == {"metadata": {"name": "n1"}}
        assert await kube.get_node("n2") == {"metadata": {"name": "n2"}}
    finally:
        await kube.close()
    assert [(r.client, r.authorization) for r in seen] == [("hami-test", None)] * 2
    assert seen[0].headers["User-Agent"].startswith("hami-scheduler/")
    gc.collect()
    # The library's own session was closed, not dropped.
    assert not [w for w in recwarn if "Unclosed" in str(w.message)]


async def test_connect_honours_a_proxy_the_kubeconfig_names(
    apiserver: ApiServer,
) -> None:
    url, kubeconfig, seen = apiserver
    tunnels: list[str] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ")
        assert method == "CONNECT"
        tunnels.append(target)
        host, port = target.rsplit(":", 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(proxy, "127.0.0.1", 0)
    proxy_port = server.sockets[0].getsockname()[1]
    kube = Kube(await connect(str(kubeconfig(**{"proxy-url": f"http://127.0.0.1:{proxy_port}"}))))
    try:
        assert await kube.get_node("n1") == {"metadata": {"name": "n1"}}
    finally:
        await kube.close()
        server.close()
    assert tunnels == [url.removeprefix("https://")]
    assert [r.client for r in seen] == ["hami-test"]


async def test_a_write_is_fenced_when_its_slot_comes_not_when_it_queued(
    aiohttp_server: AiohttpServer,
) -> None:
    """A write that waited for a limiter slot while the leadership term ended is never sent;
    the one holding the slot was sent before and is unaffected."""
    sent: list[str] = []
    arrived = asyncio.Event()
    release = asyncio.Event()

    async def patch(request: web.Request) -> web.Response:
        sent.append(request.match_info["name"])
        arrived.set()
        await release.wait()
        return web.json_response({"metadata": {"name": request.match_info["name"]}})

    app = web.Application()
    app.router.add_patch("/api/v1/nodes/{name}", patch)
    server = await aiohttp_server(app)
    kube = Kube(
        ApiClient(Configuration(host=str(server.make_url("")).rstrip("/"))),
        timeout=5,
        writes=WriteLimiter(1),
    )
    term = Term(1)
    try:
        first = asyncio.create_task(
            kube.patch_node_annotations("a", {"k": "v"}, "1", fence=term.check)
        )
        await arrived.wait()
        queued = asyncio.create_task(
            kube.patch_node_annotations("b", {"k": "v"}, "1", fence=term.check)
        )
        await asyncio.sleep(0.05)
        assert kube.writes.queued == 1
        term.end()
        release.set()
        await first
        with pytest.raises(NotLeading):
            await queued
        assert sent == ["a"]
        assert kube.writes.in_flight == 0
    finally:
        await kube.close()


async def test_a_relist_asked_for_cuts_a_live_watch_short_and_lists_again(serve: Serve) -> None:
    """A watch that looks alive but misses what it must show (hami.runtime.sight) is not
    waited on for a 410 that may never come."""
    server = Paged([([pod("a", "10")], "10"), ([pod("b", "20")], "20")], per_page=10)
    kube = await serve({"/api/v1/pods": server})
    sink = Recorder()
    informer = Informer(kube, "pods", sink)
    stop = asyncio.Event()
    task = asyncio.create_task(informer.run(stop))
    try:
        await until(lambda: bool(server.watched_from()))
        assert informer.relist("the test asks") is True
        assert informer.relist("again") is False  # one is already asked for
        await until(lambda: len(server.watched_from()) == 2)
    finally:
        stop.set()
        await asyncio.wait_for(task, 2)
    assert server.watched_from() == ["10", "20"]
    assert len([q for q in server.lists() if not q.get("continue")]) == 2
    assert sink.names == {"b"}
