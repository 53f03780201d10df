"""The node locks as the watch last showed them, so a bind can wait for a release instead of
polling the Node.

HAMi's device plugin releases a node's lock once it has allocated the pod the
lock names; the Node update that says so reaches every watcher within
milliseconds. A bind that met another pod's lock waits here for that update
(or at most `recheck` seconds, in case an event is missed) and then tries again.
"""

import asyncio
import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from hami.engine.names import NODE_LOCK
from hami.kube.informer import is_older


class LockWatch:
    def __init__(self, recheck: float = 1.0) -> None:
        self.recheck = recheck
        self._values: dict[str, str | None] = {}
        self._versions: dict[str, str] = {}
        self._changed: dict[str, asyncio.Event] = {}

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
        self._set(name, (meta.get("annotations") or {}).get(NODE_LOCK))

    def tap(self, nodes: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        """The nodes of a relist, each recorded on its way to the cache."""
        for node in nodes:
            self.seen(node)
            yield node

    def gone(self, node: Mapping[str, Any]) -> None:
        name = str((node.get("metadata") or {}).get("name", ""))
        self._versions.pop(name, None)
        self._set(name, None)

    def _set(self, name: str, value: str | None) -> None:
        if self._values.get(name) == value:
            return
        if value is None:
            self._values.pop(name, None)
        else:
            self._values[name] = value
        changed = self._changed.pop(name, None)
        if changed is not None:
            changed.set()

    def value(self, node: str) -> str | None:
        return self._values.get(node)

    def node(self, name: str) -> dict[str, Any] | None:
        """The Node's lock and resourceVersion as last seen, shaped like a Node; None if unseen."""
        version = self._versions.get(name)
        if version is None:
            return None
        lock = self._values.get(name)
        annotations = {NODE_LOCK: lock} if lock is not None else {}
        return {"metadata": {"name": name, "resourceVersion": version, "annotations": annotations}}

    async def changed(self, node: str, since: str | None, within: float) -> None:
        """Return once the node's lock is no longer `since`, or after `within` (at most
        `recheck`) seconds."""
        if self._values.get(node) != since:
            return
        event = self._changed.setdefault(node, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), min(within, self.recheck))
