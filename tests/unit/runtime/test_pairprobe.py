"""/healthz/pair answers for this process and the kube-scheduler beside it (a real HTTP server on
127.0.0.1 stands in for kube-scheduler's /healthz)."""

import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpClient, AiohttpServer

from hami.runtime.pairprobe import check_url, pair_route


async def probe(client_of: AiohttpClient, url: str) -> tuple[int, str]:
    app = web.Application()
    app.add_routes([pair_route(url, timeout=0.5)])
    client = await client_of(app)
    resp = await client.get("/healthz/pair")
    return resp.status, await resp.text()


@pytest.mark.parametrize(("status", "answer"), [(200, 200), (500, 503)])
async def test_the_pair_is_as_healthy_as_kube_scheduler(
    aiohttp_server: AiohttpServer, aiohttp_client: AiohttpClient, status: int, answer: int
) -> None:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(status=status, text="ok" if status == 200 else "[-]leaderElection")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    server = await aiohttp_server(app, host="127.0.0.1")
    code, text = await probe(aiohttp_client, f"http://127.0.0.1:{server.port}/healthz")
    assert code == answer, text
    if answer != 200:
        assert "answered 500: [-]leaderElection" in text


async def test_a_kube_scheduler_that_does_not_answer_fails_the_pair(
    aiohttp_client: AiohttpClient, unused_tcp_port: int
) -> None:
    code, text = await probe(aiohttp_client, f"https://127.0.0.1:{unused_tcp_port}/healthz")
    assert code == 503 and "does not answer" in text


async def test_without_a_peer_the_pair_is_this_process(aiohttp_client: AiohttpClient) -> None:
    assert await probe(aiohttp_client, "") == (200, "ok")


@pytest.mark.parametrize("url", ["https://10.0.0.1:10259/healthz", "file:///etc/passwd"])
def test_only_a_loopback_kube_scheduler_can_be_named(url: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        check_url(url)
