"""List-then-watch for one resource, feeding a cache through a Sink.

Raw JSON all the way: objects reach the sink as dicts (minus managedFields,
which is large and useless to a scheduler), one LIST page at a time, so the
informer never holds more of the cluster than a page (and the next, on its way)
and what the sink keeps.
A relist reconciles in place, upserting what it finds and then deleting what
it no longer finds, so the sink never drops an object that still exists.
The loop survives everything but cancellation: a 410 relists, as does a
relist() asked for by whoever finds the watch behind, and any other failure
resumes the watch from the last resourceVersion after a jittered backoff,
capped at a few seconds so that being out of touch never outlasts its cause
by much (hami.cache.freshness bounds how long the cache may be).
"""

import asyncio
import contextlib
import logging
import random
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from hami.kube.api import KubeAPI
from hami.kube.calls import Obj
from hami.kube.errors import Gone, KubeError, Unavailable
from hami.kube.lifecycle import run_until
from hami.kube.listwatch import Resource

log = logging.getLogger(__name__)


class Sink(Protocol):
    """Where an informer delivers; it is the informer's alone from its first list on."""

    def replace(self, objects: list[Obj]) -> None:
        """Start over from `objects`, the first page of the informer's first list: whatever
        the sink held before is not the informer's to know about."""

    def upsert(self, obj: Obj) -> None: ...

    def delete(self, obj: Obj) -> None:
        """`obj` may be a tombstone that carries only metadata uid, namespace and name."""


@dataclass(frozen=True, slots=True)
class Delivered:
    """What the informer remembers of an object it delivered: enough to spot a stale
    update, and to address the delete should a later list not hold the object."""

    resource_version: str
    namespace: str
    name: str


@dataclass(frozen=True)
class Upsert:
    obj: Obj
    resource_version: str


@dataclass(frozen=True)
class Delete:
    obj: Obj
    uid: str
    resource_version: str


@dataclass(frozen=True)
class Bookmark:
    resource_version: str


@dataclass(frozen=True)
class Relist:
    reason: str


@dataclass(frozen=True)
class Reconnect:
    reason: str


@dataclass(frozen=True)
class Ignore:
    reason: str


Step = Upsert | Delete | Bookmark | Relist | Reconnect | Ignore


def strip(obj: Obj) -> Obj:
    """The object without metadata.managedFields; the input is left untouched."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or "managedFields" not in metadata:
        return obj
    return {**obj, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}


def is_older(candidate: str, current: str) -> bool:
    """Whether resourceVersion `candidate` is not newer than `current`.

    resourceVersions are formally opaque; the API server's are etcd revisions,
    so they compare as integers. Anything else is taken as newer, because
    dropping a real update is worse than applying a duplicate.
    """
    try:
        return int(candidate) <= int(current)
    except ValueError:
        return False


def _identity(metadata: Mapping[str, Any]) -> str:
    return str(metadata.get("uid") or f"{metadata.get('namespace', '')}/{metadata.get('name', '')}")


def interpret(event: Mapping[str, Any], delivered: Mapping[str, Delivered]) -> Step:
    """Decide what one watch event means, given what was delivered per uid."""
    kind = event.get("type")
    obj = event.get("object")
    if not isinstance(obj, dict):
        return Ignore(f"{kind} event without an object")
    if kind == "ERROR":
        code, reason = obj.get("code"), obj.get("reason")
        message = str(obj.get("message") or reason or "watch error")
        if code == 410 or reason in ("Expired", "Gone"):
            return Relist(message)
        return Reconnect(message)
    metadata = obj.get("metadata") or {}
    rv = str(metadata.get("resourceVersion") or "")
    if kind == "BOOKMARK":
        return Bookmark(rv) if rv else Ignore("bookmark without a resourceVersion")
    uid = _identity(metadata)
    if kind == "DELETED":
        # Always delivered: a deletion is final for its uid and dropping one would
        # leak the pod's devices in the cache.
        return Delete(strip(obj), uid, rv)
    if kind in ("ADDED", "MODIFIED"):
        seen = delivered.get(uid)
        if seen is not None and rv and is_older(rv, seen.resource_version):
            return Ignore(f"stale {kind} at {rv}, already delivered {seen.resource_version}")
        return Upsert(strip(obj), rv)
    return Ignore(f"unknown event type {kind!r}")


# Listed objects the sink takes in between two turns of the event loop.
DELIVERY_CHUNK = 100
# The longest pause between two attempts to list or watch again.
RECONNECT_CAP = 5.0


def backoff_delay(failures: int, *, base: float = 0.5, cap: float = RECONNECT_CAP) -> float:
    """Exponential in consecutive failures, capped, with half of it jittered."""
    ceiling = min(cap, base * (1 << min(max(0, failures - 1), 16)))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


class Informer:
    def __init__(
        self,
        kube: KubeAPI,
        resource: Resource,
        sink: Sink,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        namespace: str | None = None,
        watch_timeout: int = 60,
        inactivity: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        relisting: Callable[[], None] | None = None,
        relisted: Callable[[], None] | None = None,
    ) -> None:
        """`inactivity` bounds the silence on an open watch; the server sends a
        bookmark about once a minute and just before it ends a watch (after
        `watch_timeout`), so longer silence means a stalled connection.

        `relisting` is called before every complete list and `relisted` after it (the
        objects not listed deleted): what a sink learnt of by other means than this
        informer before the list started is settled by the list."""
        self.kube = kube
        self.resource = resource
        self.sink = sink
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.namespace = namespace
        self.watch_timeout = watch_timeout
        self.inactivity = inactivity
        self.clock = clock
        self.relisting = relisting
        self.relisted = relisted
        self.synced = asyncio.Event()
        # When the API server was last heard from (a list, a watch accepted, an event or a
        # bookmark); None until the first list.
        self.last_event_monotonic: float | None = None
        self.resource_version = ""
        self._delivered: dict[str, Delivered] = {}
        # Until its first page has gone through sink.replace, the sink may hold objects of
        # someone else's; from then on the informer knows every object the sink holds.
        self._sink_taken = False
        self._progressed = False
        # relist(): why the next list was asked for, and the watch it cuts short.
        self._relist: str | None = None
        self._watching: asyncio.Task[None] | None = None
        self.listing = False

    def relist(self, reason: str) -> bool:
        """List again now, cutting the current watch short: for a watch that looks alive but
        does not show what it must (a pod this process bound). What a complete list shows is
        what the sink's relisted() settles by. Whether a list was asked for (not while one
        runs, or one was asked for already)."""
        if self.listing or self._relist is not None:
            return False
        self._relist = reason
        if self._watching is not None:
            self._watching.cancel()
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """List and watch until `stop` is set."""
        await run_until(stop, self._loop(), f"informer-{self.resource}")

    async def _loop(self) -> None:
        context = {"resource": self.resource}
        failures = 0
        need_list = True
        while True:
            self._progressed = False
            try:
                if need_list or self._relist is not None:
                    need_list = True  # until a list completes: a failed one is tried again
                    await self._list()
                    need_list = False
                self._watching = asyncio.ensure_future(self._watch())
                try:
                    await self._watching
                finally:
                    self._watching = None
                failures = 0
                continue
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self._relist is None or (task is not None and task.cancelling()):
                    raise
                log.warning("listing again", extra={**context, "why": self._relist})
                continue
            except Gone as e:
                need_list = True
                log.info("watch expired, listing again", extra={**context, "error": str(e)})
            except Exception as e:  # the informer must outlive every failure
                log.warning(
                    "list or watch failed",
                    extra={**context, "error": str(e), "resource_version": self.resource_version},
                    exc_info=not isinstance(e, KubeError),
                )
            failures = 1 if self._progressed else failures + 1
            await asyncio.sleep(backoff_delay(failures))

    async def _list(self) -> None:
        """Deliver the current set page by page, then delete what it no longer holds."""
        self.listing = True
        self._relist = None
        try:
            await self._list_all()
        finally:
            self.listing = False

    async def _list_all(self) -> None:
        if self.relisting is not None:
            self.relisting()
        pages = self.kube.list_pages(
            self.resource,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            namespace=self.namespace,
        )
        listed: set[str] = set()
        rv = ""
        async with contextlib.aclosing(pages):
            async for items, page_rv in pages:
                await self._deliver_page(items, listed)
                rv = page_rv
        for uid in [u for u in self._delivered if u not in listed]:
            self._apply(self.sink.delete, self._tombstone(uid))
        if self.relisted is not None:
            self.relisted()
        self.resource_version = rv
        self.last_event_monotonic = self.clock()
        self._progressed = True
        self.synced.set()
        log.info(
            "listed",
            extra={"resource": self.resource, "count": len(listed), "resource_version": rv},
        )

    async def _deliver_page(self, items: list[Obj], listed: set[str]) -> None:
        objects = [strip(item) for item in items]
        # The caller's loop keeps `items` bound while the next page downloads; emptied, it
        # no longer keeps this page's objects alive meanwhile.
        items.clear()
        if not self._sink_taken:
            self.sink.replace(objects)
            self._sink_taken = True
            listed.update(self._remember(obj) for obj in objects)
            return
        for start in range(0, len(objects), DELIVERY_CHUNK):
            # A page is tens of milliseconds of the sink's work: between its chunks the loop
            # sends the request for the next page (ListWatch.list_pages) and answers probes.
            await asyncio.sleep(0)
            for obj in objects[start : start + DELIVERY_CHUNK]:
                self._apply(self.sink.upsert, obj)
                listed.add(self._remember(obj))

    def _remember(self, obj: Obj) -> str:
        metadata = obj.get("metadata") or {}
        uid = _identity(metadata)
        self._delivered[uid] = Delivered(
            str(metadata.get("resourceVersion") or ""),
            # Otherwise every pod would keep a copy of its namespace's name.
            sys.intern(str(metadata.get("namespace") or "")),
            str(metadata.get("name") or ""),
        )
        return uid

    def _tombstone(self, uid: str) -> Obj:
        gone = self._delivered.pop(uid)
        return {
            "metadata": {
                "uid": uid,
                "namespace": gone.namespace,
                "name": gone.name,
                "resourceVersion": gone.resource_version,
            }
        }

    async def _watch(self) -> None:
        """Apply events until the server ends the watch; raises Gone when a relist is needed."""
        events = self.kube.watch_objects(
            self.resource,
            self.resource_version,
            timeout_seconds=self.watch_timeout,
            inactivity=self.inactivity,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            namespace=self.namespace,
            connected=self._in_touch,
        )
        # aclosing: leaving early (a relist) must close the HTTP response now, not at GC.
        async with contextlib.aclosing(events):
            async for event in events:
                self._in_touch()
                self._progressed = True
                step = interpret(event, self._delivered)
                match step:
                    case Upsert(obj, rv):
                        self._apply(self.sink.upsert, obj)
                        self._remember(obj)
                        self.resource_version = rv or self.resource_version
                    case Delete(obj, uid, rv):
                        self._apply(self.sink.delete, obj)
                        self._delivered.pop(uid, None)
                        self.resource_version = rv or self.resource_version
                    case Bookmark(rv):
                        self.resource_version = rv
                    case Relist(reason):
                        raise Gone(reason, status=410)
                    case Reconnect(reason):
                        raise Unavailable(f"watch {self.resource}: {reason}")
                    case Ignore(reason):
                        log.debug(
                            "watch event ignored", extra={"resource": self.resource, "why": reason}
                        )

    def _in_touch(self) -> None:
        self.last_event_monotonic = self.clock()

    def _apply(self, handler: Callable[[Obj], None], obj: Obj) -> None:
        # A cache bug on one object must not stall the stream for every other one.
        try:
            handler(obj)
        except Exception:
            metadata = obj.get("metadata") or {}
            log.exception(
                "cache rejected an object",
                extra={
                    "resource": self.resource,
                    "namespace": metadata.get("namespace", ""),
                    "object": metadata.get("name", ""),
                },
            )
