"""The request-body budget: every hold is given back whatever ends the request (its answer, an
error, the client hanging up, cancellation), a body over the per-request limit is refused by its
Content-Length before it is read, and one with no room waits briefly, then gets a 503."""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from hami.runtime.bodies import SMALL, BodyBudget, BudgetExhaustedError
from hami.runtime.listeners import Listener, listen

KIB = 1024
LARGE = 4 * SMALL


async def test_a_hold_is_given_back_after_its_body_and_after_an_error() -> None:
    budget = BodyBudget(8 * LARGE, LARGE)
    async with budget.hold(LARGE, budget.total):
        assert budget.held == LARGE
    assert budget.held == 0
    with pytest.raises(RuntimeError):
        async with budget.hold(LARGE, budget.total):
            raise RuntimeError("the handler failed")
    assert budget.held == 0


async def test_a_body_with_no_room_waits_then_is_refused_and_the_wait_holds_nothing() -> None:
    budget = BodyBudget(2 * LARGE, LARGE, wait=0.05)
    async with budget.hold(2 * LARGE, budget.total):
        with pytest.raises(BudgetExhaustedError):
            async with budget.hold(1, budget.total):
                pass
        assert budget.held == 2 * LARGE and budget.refused == 1
    assert budget.held == 0


async def test_a_waiting_body_is_let_in_when_room_is_given_back() -> None:
    budget = BodyBudget(2 * LARGE, LARGE, wait=5)
    first = budget.hold(2 * LARGE, budget.total)
    await first.__aenter__()
    order: list[str] = []

    async def second() -> None:
        async with budget.hold(LARGE, budget.total):
            order.append("second in")

    waiting = asyncio.create_task(second())
    await asyncio.sleep(0)
    assert order == []
    await first.__aexit__(None, None, None)
    await waiting
    assert order == ["second in"] and budget.held == 0


async def test_cancelled_while_waiting_or_while_holding_gives_everything_back() -> None:
    budget = BodyBudget(2 * LARGE, LARGE, wait=5)
    held = asyncio.Event()

    async def body(size: int) -> None:
        async with budget.hold(size, budget.total):
            held.set()
            await asyncio.sleep(60)  # the client's body trickles in

    holding = asyncio.create_task(body(2 * LARGE))
    await held.wait()
    waiting = asyncio.create_task(body(LARGE))
    await asyncio.sleep(0.01)
    for task in (waiting, holding):  # the waiter first: it must leave the queue
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert budget.held == 0
    async with budget.hold(2 * LARGE, budget.total):  # nobody is left queued ahead
        assert budget.held == 2 * LARGE


async def test_room_granted_as_the_wait_is_cancelled_is_given_back() -> None:
    budget = BodyBudget(2 * LARGE, LARGE, wait=5)
    first = budget.hold(2 * LARGE, budget.total)
    await first.__aenter__()

    async def second() -> None:
        async with budget.hold(LARGE, budget.total):
            raise AssertionError("never entered")

    waiting = asyncio.create_task(second())
    await asyncio.sleep(0)
    await first.__aexit__(None, None, None)  # grants the waiter its room ...
    waiting.cancel()  # ... which is cancelled before it runs again
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    assert budget.held == 0


def test_large_bodies_from_the_network_leave_a_quarter_to_small_ones_and_to_loopback() -> None:
    budget = BodyBudget(16 * LARGE, LARGE)
    assert budget.ceiling(LARGE, trusted=False) == 12 * LARGE
    assert budget.ceiling(SMALL, trusted=False) == 16 * LARGE
    assert budget.ceiling(LARGE, trusted=True) == 16 * LARGE


def test_a_budget_smaller_than_two_bodies_is_refused() -> None:
    with pytest.raises(ValueError, match="fewer than two bodies"):
        BodyBudget(LARGE, LARGE)


# --- through a listener ------------------------------------------------------------------------

PER_REQUEST = 16 * KIB


@pytest.fixture
async def served() -> AsyncIterator[tuple[Listener, BodyBudget]]:
    budget = BodyBudget(2 * PER_REQUEST, PER_REQUEST, wait=0.2)

    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await request.read())

    app = web.Application(client_max_size=PER_REQUEST)
    app.add_routes([web.post("/", echo)])
    listener = await listen(
        app,
        "127.0.0.1",
        0,
        tls=None,
        read_timeout=5,
        keepalive_timeout=10,
        shutdown_timeout=1,
        max_connections=16,
        bodies=budget,
    )
    yield listener, budget
    await listener.stop()


async def send_headers(
    port: int, headers: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST / HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
    await writer.drain()
    return reader, writer


async def answer(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], dict[str, object]]:
    async with asyncio.timeout(5):
        raw = await reader.read()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return lines[0], headers, json.loads(body)


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):  # a failure guard only
        for _ in range(500):
            if condition():
                return
            await asyncio.sleep(0.01)
    raise AssertionError("the budget never got there")


async def test_a_body_over_the_limit_is_refused_by_its_length_before_it_is_sent(
    served: tuple[Listener, BodyBudget],
) -> None:
    listener, budget = served
    reader, writer = await send_headers(listener.port, f"Content-Length: {PER_REQUEST + 1}\r\n")
    line, _, status = await answer(reader)  # not one byte of the body sent
    assert line == "HTTP/1.1 413 Request Entity Too Large"
    assert status["reason"] == "RequestEntityTooLarge" and status["code"] == 413
    assert "over this server's limit of 0.015625 MiB per request" in str(status["message"])
    assert budget.held == 0
    await close(writer)


async def test_with_the_budget_full_a_body_waits_then_gets_503_with_retry_after(
    served: tuple[Listener, BodyBudget],
) -> None:
    listener, budget = served
    # Two slow bodies hold the whole budget; a third is refused; hanging up gives it all back.
    slow = [
        await send_headers(listener.port, f"Content-Length: {PER_REQUEST}\r\n") for _ in range(2)
    ]
    await until(lambda: budget.held == 2 * PER_REQUEST)
    reader, writer = await send_headers(listener.port, "Content-Length: 10\r\n")
    line, headers, status = await answer(reader)
    assert line == "HTTP/1.1 503 Service Unavailable" and headers["Retry-After"] == "1"
    assert status["reason"] == "ServiceUnavailable"
    assert "too many large request bodies in flight" in str(status["message"])
    await close(writer)
    for _, w in slow:
        await close(w)
    await until(lambda: budget.held == 0)


async def test_a_chunked_body_holds_the_per_request_limit_until_answered(
    served: tuple[Listener, BodyBudget],
) -> None:
    listener, budget = served
    reader, writer = await send_headers(listener.port, "Transfer-Encoding: chunked\r\n")
    await until(lambda: budget.held == PER_REQUEST)
    writer.write(b"2\r\nok\r\n0\r\n\r\n")
    await writer.drain()
    async with asyncio.timeout(5):
        assert (await reader.readuntil(b"ok")).startswith(b"HTTP/1.1 200")
    assert budget.held == 0
    await close(writer)


async def test_a_small_body_is_not_queued_behind_large_ones_waiting_for_room() -> None:
    budget = BodyBudget(16 * LARGE, LARGE, wait=5)
    large = budget.ceiling(LARGE, trusted=False)
    filled = budget.hold(large, large)
    await filled.__aenter__()  # large bodies fill their three quarters
    waiting = asyncio.create_task(budget.hold(LARGE, large).__aenter__())
    await asyncio.sleep(0)
    async with asyncio.timeout(1):  # a guard: queued, it would wait for the large ones
        async with budget.hold(SMALL, budget.ceiling(SMALL, trusted=False)):
            assert not waiting.done()
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    await filled.__aexit__(None, None, None)
    assert budget.held == 0
