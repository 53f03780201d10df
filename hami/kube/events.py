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
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
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


class EventReason(StrEnum):
    """The reason of every Event hami posts; HAMi's own words where HAMi posts it too."""

    FILTERING_FAILED = "FilteringFailed"
    FILTERING_SUCCEED = "FilteringSucceed"
    # kube-scheduler's own reason, posted by us only for a pod behind our DRA gate, of which
    # kube-scheduler says nothing until the gate is lifted.
    FAILED_SCHEDULING = "FailedScheduling"
    BINDING_FAILED = "BindingFailed"
    BINDING_SUCCEED = "BindingSucceed"
    PREEMPTING = "Preempting"
    PREEMPTED = "Preempted"
    FAILED_PREEMPTION = "FailedPreemption"
    ALLOCATION_EDIT_IGNORED = "AllocationEditIgnored"
    DEVICE_PLUGIN_REFUSED = "DevicePluginRefused"
    # A bind left the node's pods taking more card slots than its device plugin advertises.
    NODE_ADVERTISES_TOO_FEW_GPUS = "NodeAdvertisesTooFewGPUs"
    # On the scheduler's own pod: blind past --blind-give-up-seconds, it restarts.
    BLIND_RESTART = "BlindRestart"


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


# What kube-scheduler's every retry of a pod says again while its cause lasts: in a flood these
# are dropped and wait behind the rest. Every other reason is said once (an edit ignored, a
# preemption), so a dropped or late one is lost for good.
REPEATED = frozenset(
    {
        EventReason.FILTERING_FAILED,
        EventReason.FILTERING_SUCCEED,
        EventReason.FAILED_SCHEDULING,
        EventReason.BINDING_FAILED,
        EventReason.BINDING_SUCCEED,
    }
)


def _folded(lane: deque[_Record]) -> list[tuple[_Record, int]]:
    """Up to _BATCH records taken from `lane`; identical ones become one API call."""
    folded: dict[_Key, tuple[_Record, int]] = {}
    for _ in range(min(_BATCH, len(lane))):
        rec = lane.popleft()
        _, n = folded.get(rec.key, (rec, 0))
        folded[rec.key] = (rec, n + 1)
    return list(folded.values())


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
        in `dropped`, the hami_events_dropped gauge). Events said once are queued apart from
        the REPEATED ones and posted first, so a flood of failures cannot drop or delay them.
        """
        self.kube = kube
        self.instance = instance
        self.now = now
        self.fold_window = fold_window
        self.remembered = remembered
        self.dropped = 0
        self.rate = rate
        self.queue_size = queue_size
        # Two lanes, each of queue_size records: what is said once waits behind nothing.
        self._once: deque[_Record] = deque()
        self._routine: deque[_Record] = deque()
        self._carried: list[tuple[_Record, int]] = []  # the rest of a routine batch cut short
        self._queued = asyncio.Event()
        self._posted: OrderedDict[_Key, _Posted] = OrderedDict()

    def record(
        self, obj_ref: Mapping[str, str], type_: EventType, reason: EventReason, message: str
    ) -> None:
        """Queue an event about the pod {namespace, name, uid}; never blocks, and raises only
        for a reason outside EventReason (a bug, not a condition of the cluster)."""
        reason = EventReason(reason)
        if self.rate <= 0:
            return
        lane = self._routine if reason in REPEATED else self._once
        if len(lane) >= self.queue_size:
            self.dropped += 1
            # Logged sparsely: a full queue means the API server is slow, and a
            # log line per drop would add to the trouble.
            if self.dropped & (self.dropped - 1) == 0:
                log.warning(
                    "event queue full, dropping events", extra={"dropped_total": self.dropped}
                )
            return
        lane.append(
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
        self._queued.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Post queued events until `stop` is set."""
        await run_until(stop, self._post_forever(), "event-recorder")

    async def _post_forever(self) -> None:
        while True:
            await self._queued.wait()
            await self._post_some()

    async def flush(self, within: float) -> None:
        """Post what is still queued, for at most `within` seconds (at shutdown, after run)."""

        async def drain() -> None:
            while self._queued.is_set():
                await self._post_some()

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(drain(), within)

    async def _post_some(self) -> None:
        """Post a batch of what is said once, else of the routine records; a record said once
        that arrives meanwhile cuts a routine batch short."""
        once = bool(self._once)
        if once:
            batch = _folded(self._once)
        else:
            batch, self._carried = self._carried or _folded(self._routine), []
        loop = asyncio.get_running_loop()
        for i, (rec, n) in enumerate(batch):
            if not once and self._once:
                self._carried = batch[i:]
                return
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
        if not (self._once or self._routine or self._carried):
            self._queued.clear()

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
