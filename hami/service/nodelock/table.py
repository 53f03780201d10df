"""The node locks as last seen: the only in-memory copy of each lock's value.

HAMi's device plugin releases a node's lock once it has allocated the pod the lock names; the
Node update that says so reaches every watcher within milliseconds. A bind that met another
pod's lock waits here for that update (or at most `recheck` seconds, in case an event is missed)
and then tries again. The cache forwards every Node it is shown (watch, relist, deletion) and
reads back the pod each lock names (an unbound pod's allocation counts only while its node's
lock names it: hami.cache.records.LockTable); our own lock writes record what they returned,
which comes before the watch shows it.
"""

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hami.engine.names import NODE_LOCK
from hami.kube.informer import is_older
from hami.service.nodelock.wire import lock_holder

HOLD_SAMPLE_CAP = 60.0


@dataclass(slots=True)
class _Lock:
    value: str
    holder: tuple[str, str] | None  # the pod it names, read from `value` once
    written_at: float | None = None  # loop time this process wrote it; None: someone else


class NodeLocks:
    """Each node's locks by annotation: HAMi's `hami.io/mutex.lock` (the `key` every method
    reads unless told), and each configured family's own (hami.service.nodelock.wire.lock_keys)."""

    def __init__(
        self,
        recheck: float = 1.0,
        *,
        keys: tuple[str, ...],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.recheck = recheck
        self.clock = clock
        # How long a HAMi lock stays on a node (taken to released or handed on), a moving
        # average of the last ones: what a bind queued behind a held lock waits.
        self.hold = 0.0
        self._since: dict[str, float] = {}
        # The configured families' (lock_keys): a node is read for these and no other.
        self.keys = keys
        self._locks: dict[tuple[str, str], _Lock] = {}
        self._versions: dict[str, str] = {}
        self._changed: dict[tuple[str, str], asyncio.Event] = {}
        self._moved: list[Callable[[str], None]] = []
        self._held = 0  # nodes whose HAMi lock is held

    def listen(self, moved: Callable[[str], None]) -> None:
        """Call `moved(node)` whenever the pod a node's lock names changes."""
        self._moved.append(moved)

    def seen(self, node: Mapping[str, Any]) -> None:
        """A Node from the watch (or a relist), or as one of our own writes returned it: these
        come before the watch shows them, so a watch event older than what is known is
        dropped."""
        meta = node.get("metadata") or {}
        name = str(meta.get("name", ""))
        version = str(meta.get("resourceVersion") or "")
        known = self._versions.get(name)
        if version and known and is_older(version, known):
            return
        if version:
            self._versions[name] = version
        annotations = meta.get("annotations") or {}
        for key in self.keys:
            self._set(name, key, annotations.get(key))

    def written(self, node: Mapping[str, Any], at: float, key: str = NODE_LOCK) -> None:
        """A Node as one of our writes of its `key` lock returned it at loop time `at`."""
        self.seen(node)
        meta = node.get("metadata") or {}
        lock = self._locks.get((str(meta.get("name", "")), key))
        if lock is not None and lock.value == (meta.get("annotations") or {}).get(key):
            lock.written_at = at

    def gone(self, node: Mapping[str, Any]) -> None:
        name = str((node.get("metadata") or {}).get("name", ""))
        self._versions.pop(name, None)
        for key in self.keys:
            self._set(name, key, None)

    def _set(self, name: str, key: str, value: str | None) -> None:
        before = self._locks.get((name, key))
        if (before.value if before is not None else None) == (value or None):
            return
        if value:
            self._locks[name, key] = _Lock(value, lock_holder(value))
        else:
            self._locks.pop((name, key), None)
        if key == NODE_LOCK:
            self._held += bool(value) - (before is not None)
            self._timed(name, bool(value))
        changed = self._changed.pop((name, key), None)
        if changed is not None:
            changed.set()
        after = self._locks.get((name, key))
        if (before and before.holder) != (after and after.holder):
            for moved in self._moved:
                moved(name)

    def _timed(self, node: str, held: bool) -> None:
        """A node's HAMi lock changed: the one before it ended now, a new one starts."""
        now = self.clock()
        start = self._since.pop(node, None)
        if start is not None:
            # Capped: a lock kept for a pod that never got its devices is not what binds
            # wait for in turn.
            sample = min(now - start, HOLD_SAMPLE_CAP)
            self.hold = sample if self.hold == 0.0 else self.hold + (sample - self.hold) / 8
        if held:
            self._since[node] = now

    def value(self, node: str, key: str = NODE_LOCK) -> str | None:
        lock = self._locks.get((node, key))
        return lock.value if lock is not None else None

    def held(self) -> int:
        """How many nodes' HAMi locks are held: each a device plugin allocating for a pod bound
        there, which the next bind to that node waits for."""
        return self._held

    def holder(self, node: str) -> tuple[str, str] | None:
        """The pod (namespace, name) the node's HAMi lock names."""
        lock = self._locks.get((node, NODE_LOCK))
        return lock.holder if lock is not None else None

    def written_at(self, node: str, key: str = NODE_LOCK) -> float | None:
        """When this process wrote the node's lock as it stands; None if it did not."""
        lock = self._locks.get((node, key))
        return lock.written_at if lock is not None else None

    def node(self, name: str, key: str = NODE_LOCK) -> dict[str, Any] | None:
        """The Node's lock and resourceVersion as last seen, shaped like a Node; None if unseen."""
        version = self._versions.get(name)
        if version is None:
            return None
        lock = self.value(name, key)
        annotations = {key: lock} if lock is not None else {}
        return {"metadata": {"name": name, "resourceVersion": version, "annotations": annotations}}

    async def changed(
        self, node: str, since: str | None, within: float, key: str = NODE_LOCK
    ) -> None:
        """Return once the node's lock is no longer `since`, or after `within` (at most
        `recheck`) seconds."""
        if self.value(node, key) != since:
            return
        event = self._changed.setdefault((node, key), asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), min(within, self.recheck))
