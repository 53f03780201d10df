"""Slow clients are cut off: half a header, half a body, a TLS handshake that never ends."""

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from hami.certs.selfsigned import write_dev_bundle
from hami.runtime.listeners import Listener, is_loopback, listen

DEADLINE = 0.5
IDLE = 4 * DEADLINE


async def echo(request: web.Request) -> web.Response:
    return web.Response(body=await request.read())


@pytest.fixture
async def plain() -> AsyncIterator[Listener]:
    app = web.Application()
    app.add_routes([web.post("/", echo)])
    listener = await listen(
        app,
        "127.0.0.1",
        0,
        tls=None,
        read_timeout=DEADLINE,
        keepalive_timeout=IDLE,
        shutdown_timeout=1,
    )
    yield listener
    await listener.stop()


async def hang_up(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """What the server sent before closing; fails if it keeps the connection past `seconds`."""
    async with asyncio.timeout(seconds):
        return await reader.read()


async def test_half_a_header_is_closed_at_the_read_deadline(plain: Listener) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", plain.port)
    writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-")
    await writer.drain()
    started = asyncio.get_running_loop().time()
    assert await closed_within(reader, IDLE * 3) == b""
    assert asyncio.get_running_loop().time() - started < IDLE, "not the idle keep-alive"
    await hang_up(writer)


async def test_a_connection_that_sends_nothing_is_closed_at_the_idle_deadline(
    plain: Listener,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", plain.port)
    assert await closed_within(reader, IDLE * 3) == b""
    await hang_up(writer)


async def test_an_idle_connection_outlives_the_read_deadline(plain: Listener) -> None:
    # Go's clients reuse an idle connection for 90 s and never resend a POST on one the server
    # closed under them: the server must keep it longer than they do (keepalive_timeout).
    reader, writer = await asyncio.open_connection("127.0.0.1", plain.port)
    request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok"
    for _ in range(2):
        writer.write(request)
        await writer.drain()
        async with asyncio.timeout(DEADLINE * 6):
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head
            assert await reader.readexactly(2) == b"ok"
        await asyncio.sleep(DEADLINE * 2)  # idle past read_timeout, within keepalive_timeout
    # Half of the next request: the read deadline applies again.
    writer.write(b"POST / HTTP/1.1\r\nHost: x\r\n")
    await writer.drain()
    assert await closed_within(reader, DEADLINE * 6) == b""
    await hang_up(writer)


async def test_half_a_body_gets_408(plain: Listener) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", plain.port)
    writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten..")
    await writer.drain()
    answer = await closed_within(reader, DEADLINE * 6)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:60]
    await hang_up(writer)


async def test_a_prompt_client_is_answered(plain: Listener) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", plain.port)
    writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    await writer.drain()
    answer = await closed_within(reader, DEADLINE * 6)
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok")
    await hang_up(writer)


async def test_a_tls_handshake_that_never_starts_is_closed(tmp_path: Path) -> None:
    bundle = write_dev_bundle(tmp_path, ["127.0.0.1"])
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(bundle.cert_file, bundle.key_file)
    listener = await listen(
        web.Application(),
        "127.0.0.1",
        0,
        tls=context,
        read_timeout=DEADLINE,
        keepalive_timeout=IDLE,
        shutdown_timeout=1,
    )
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        assert await closed_within(reader, DEADLINE * 6) == b""
        await hang_up(writer)
    finally:
        await listener.stop()


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.8.9.1", True), ("::1", True), ("localhost", True),
     ("0.0.0.0", False), ("10.0.0.1", False), ("::", False), ("hami.example", False)],
)  # fmt: skip
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
