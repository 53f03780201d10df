"""Kubernetes Events about pods, posted in the background.

Recording must never slow down or fail a filter or bind, so `record` only
enqueues (dropping when full) and a background task does the posting. A pod
that keeps failing to schedule repeats the same event every cycle; repeats of
the same (pod, type, reason, message) are folded into one Event whose count
grows, as client-go's correlator does, instead of flooding the API server.
"""

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from hami.kube.api import KubeAPI
from hami.kube.calls import Obj
from hami.kube.errors import NotFound
from hami.kube.lifecycle import run_until

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]
COMPONENT = "hami-scheduler"
# events.k8s.io's limit; core/v1 has none, but a multi-kilobyte event helps nobody.
MAX_MESSAGE = 1024
# How many events one wake-up of the poster folds together at most.
_BATCH = 256

_Key = tuple[str, str, str, str, str, str]


@dataclass(frozen=True)
class _Record:
    namespace: str
    name: str
    uid: str
    type_: EventType
    reason: str
    message: str
    at: datetime

    @property
    def key(self) -> _Key:
        return (self.namespace, self.name, self.uid, self.type_, self.reason, self.message)


@dataclass
class _Posted:
    event_name: str
    count: int
    last: datetime


def _timestamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _truncate(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


class EventRecorder:
    def __init__(
        self,
        kube: KubeAPI,
        *,
        instance: str = "",
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        queue_size: int = 1000,
        fold_window: timedelta = timedelta(minutes=10),
        remembered: int = 4096,
        rate: float = 50.0,
    ) -> None:
        """`instance` names this replica (its pod name) in the Event's source.

        An event repeating within `fold_window` of its previous occurrence bumps
        the earlier Event's count; `remembered` bounds how many distinct events
        are tracked for that. At most `rate` API calls a second are made: in a burst the API
        server's time goes to scheduling, and what does not fit the queue is dropped (counted
        in `dropped`, the hami_events_dropped gauge).
        """
        self.kube = kube
        self.instance = instance
        self.now = now
        self.fold_window = fold_window
        self.remembered = remembered
        self.dropped = 0
        self.rate = rate
        self._queue: asyncio.Queue[_Record] = asyncio.Queue(maxsize=queue_size)
        self._posted: OrderedDict[_Key, _Posted] = OrderedDict()

    def record(
        self, obj_ref: Mapping[str, str], type_: EventType, reason: str, message: str
    ) -> None:
        """Queue an event about the pod {namespace, name, uid}; never blocks, never raises."""
        if self.rate <= 0:
            return
        try:
            self._queue.put_nowait(
                _Record(
                    namespace=obj_ref.get("namespace", ""),
                    name=obj_ref.get("name", ""),
                    uid=obj_ref.get("uid", ""),
                    type_=type_,
                    reason=reason,
                    message=_truncate(message),
                    at=self.now(),
                )
            )
        except asyncio.QueueFull:
            self.dropped += 1
            # Logged sparsely: a full queue means the API server is slow, and a
            # log line per drop would add to the trouble.
            if self.dropped & (self.dropped - 1) == 0:
                log.warning(
                    "event queue full, dropping events", extra={"dropped_total": self.dropped}
                )

    async def run(self, stop: asyncio.Event) -> None:
        """Post queued events until `stop` is set."""
        await run_until(stop, self._post_forever(), "event-recorder")

    async def _post_forever(self) -> None:
        while True:
            await self._post_batch(await self._queue.get())

    async def flush(self, within: float) -> None:
        """Post what is still queued, for at most `within` seconds (at shutdown, after run)."""

        async def drain() -> None:
            while not self._queue.empty():
                await self._post_batch(self._queue.get_nowait())

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(drain(), within)

    async def _post_batch(self, first: _Record) -> None:
        batch = [first]
        while len(batch) < _BATCH and not self._queue.empty():
            batch.append(self._queue.get_nowait())
        # Identical records queued together become one API call.
        folded: dict[_Key, tuple[_Record, int]] = {}
        for rec in batch:
            _, n = folded.get(rec.key, (rec, 0))
            folded[rec.key] = (rec, n + 1)
        loop = asyncio.get_running_loop()
        for rec, n in folded.values():
            started = loop.time()
            try:
                await self._post(rec, n)
            except Exception as e:  # events are best effort; posting must go on
                log.warning(
                    "could not post event",
                    extra={
                        "namespace": rec.namespace,
                        "pod": rec.name,
                        "reason": rec.reason,
                        "error": str(e),
                    },
                )
            await asyncio.sleep(max(0.0, 1 / self.rate - (loop.time() - started)))

    async def _post(self, rec: _Record, n: int) -> None:
        prior = self._posted.get(rec.key)
        if prior is not None and rec.at - prior.last < self.fold_window:
            try:
                await self.kube.patch_event(
                    rec.namespace,
                    prior.event_name,
                    {"count": prior.count + n, "lastTimestamp": _timestamp(rec.at)},
                )
            except NotFound:
                pass  # the server's event TTL removed it: start a new one below
            else:
                prior.count += n
                prior.last = rec.at
                self._posted.move_to_end(rec.key)
                return
        created = await self.kube.create_event(rec.namespace, self._event(rec, n))
        self._posted[rec.key] = _Posted(created["metadata"]["name"], n, rec.at)
        self._posted.move_to_end(rec.key)
        while len(self._posted) > self.remembered:
            self._posted.popitem(last=False)

    def _event(self, rec: _Record, count: int) -> Obj:
        at = _timestamp(rec.at)
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{rec.name}.", "namespace": rec.namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": rec.namespace,
                "name": rec.name,
                "uid": rec.uid,
            },
            "type": rec.type_,
            "reason": rec.reason,
            "message": rec.message,
            "count": count,
            "firstTimestamp": at,
            "lastTimestamp": at,
            "source": {"component": COMPONENT, "host": self.instance},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.instance,
        }
