"""The Event recorder against the in-memory API server: a flood of the failures kube-scheduler
repeats every cycle neither drops nor delays an Event said once (an allocation edit ignored, a
preemption). tests/e2e/test_kube_io.py posts to the real API server."""

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from hami.kube.events import EventReason, EventRecorder
from tests.fakes.kubeapi import FakeKube, until


def ref(name: str) -> dict[str, str]:
    return {"namespace": "ns", "name": name, "uid": f"uid-{name}"}


def posted(api: FakeKube) -> list[str]:
    """The reasons of the Events created, in order."""
    return [body["reason"] for _, _, body in api.written("create_event")]


@contextlib.asynccontextmanager
async def running(recorder: EventRecorder) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(recorder.run(stop))
    try:
        yield
    finally:
        stop.set()
        await task


def flood(recorder: EventRecorder, n: int) -> None:
    for i in range(n):
        recorder.record(ref(f"ghost-{i}"), "Warning", EventReason.FILTERING_FAILED, "no card")


async def test_an_event_said_once_is_not_dropped_when_the_queue_is_full() -> None:
    api = FakeKube()
    recorder = EventRecorder(api, queue_size=10, rate=10_000)
    flood(recorder, 20)
    recorder.record(ref("tenant"), "Warning", EventReason.ALLOCATION_EDIT_IGNORED, "edited")
    assert recorder.dropped == 10
    await recorder.flush(5.0)
    assert posted(api).count(EventReason.ALLOCATION_EDIT_IGNORED) == 1
    assert posted(api).count(EventReason.FILTERING_FAILED) == 10


async def test_an_event_said_once_goes_ahead_of_a_backlog_of_failures() -> None:
    api = FakeKube()
    recorder = EventRecorder(api, rate=1_000)
    flood(recorder, 300)
    async with running(recorder):
        await until(lambda: len(posted(api)) >= 5)
        before = len(api.calls)
        recorder.record(ref("tenant"), "Warning", EventReason.ALLOCATION_EDIT_IGNORED, "edited")
        await until(lambda: EventReason.ALLOCATION_EDIT_IGNORED in posted(api))
        # Ahead of it, at most the one post under way when it came.
        assert posted(api).index(EventReason.ALLOCATION_EDIT_IGNORED) <= before
        await until(lambda: len(posted(api)) >= 301)
    # The backlog cut short is posted after it, none twice.
    names = [body["involvedObject"]["name"] for _, _, body in api.written("create_event")]
    assert len(set(names)) == 301


async def test_repeats_queued_together_are_one_event_with_their_count() -> None:
    api = FakeKube()
    recorder = EventRecorder(api, rate=10_000)
    for _ in range(3):
        recorder.record(ref("p"), "Warning", EventReason.FILTERING_FAILED, "no card")
    await recorder.flush(5.0)
    recorder.record(ref("p"), "Warning", EventReason.FILTERING_FAILED, "no card")
    await recorder.flush(5.0)
    (event,) = api.events(EventReason.FILTERING_FAILED)
    assert event["count"] == 4


def test_an_unknown_reason_is_an_error() -> None:
    recorder = EventRecorder(FakeKube())
    with pytest.raises(ValueError, match="NoSuchReason"):
        recorder.record(ref("p"), "Warning", "NoSuchReason", "?")  # type: ignore[arg-type]
