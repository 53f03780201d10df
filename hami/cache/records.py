"""The pods the cache keeps a record of, by uid and by node, and what it has told about them.

A record (hami.engine.trust.Seen) is kept for every live pod that carries an allocation or,
bound, holds GPUs: it is what the pod is counted from, now and whenever its node's cards or
lock change. Each allocation not counted as written, and each edit of a bound pod's allocation
that is ignored, is reported once, not on every event of the pod.
"""

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from hami.engine.inventory import placement_of
from hami.engine.trust import Seen

# (namespace, name, why): an allocation annotation the cache did not count as written.
Distrust = Callable[[str, str, str], None]
# (namespace, name, uid, what): a bound pod's allocation changed or removed, and ignored.
EditIgnored = Callable[[str, str, str, str], None]


class PodRecords:
    def __init__(
        self, on_distrust: Distrust | None = None, on_edit_ignored: EditIgnored | None = None
    ) -> None:
        self._on_distrust = on_distrust
        self._on_edit_ignored = on_edit_ignored
        self._seen: dict[str, Seen] = {}
        self._by_node: dict[str, set[str]] = {}
        self._distrusted: dict[str, tuple[object, ...]] = {}  # as written, reported once
        self._edits: dict[str, str] = {}  # the ignored edit last reported

    def get(self, uid: str) -> Seen | None:
        return self._seen.get(uid)

    def put(self, uid: str, seen: Seen | None) -> None:
        before = self._seen.pop(uid, None)
        for node in before.nodes() if before is not None else ():
            on_node = self._by_node[node]
            on_node.discard(uid)
            if not on_node:
                del self._by_node[node]
        if seen is None:
            self._distrusted.pop(uid, None)
            self._edits.pop(uid, None)
            return
        self._seen[uid] = seen
        for node in seen.nodes():
            self._by_node.setdefault(node, set()).add(uid)

    def on(self, node: str) -> list[str]:
        """The uids of the pods whose count depends on `node`."""
        return sorted(self._by_node.get(node, ()))

    def uids(self) -> Iterable[str]:
        return list(self._seen)

    def edited(self, seen: Seen, edit: str) -> None:
        """Report an ignored edit of a bound pod's allocation, once while it stands."""
        if not edit:
            self._edits.pop(seen.uid, None)
            return
        if self._edits.get(seen.uid) == edit:
            return
        self._edits[seen.uid] = edit
        if self._on_edit_ignored is not None:
            self._on_edit_ignored(seen.namespace, seen.name, seen.uid, edit)

    def distrusted(self, seen: Seen, problem: str) -> None:
        """Report an allocation not counted as written, once per value written."""
        written = seen.written
        if written is None or not problem:
            self._distrusted.pop(seen.uid, None)
            return
        key = (placement_of(written), problem)
        if self._distrusted.get(seen.uid) == key:
            return
        self._distrusted[seen.uid] = key
        if self._on_distrust is not None:
            self._on_distrust(seen.namespace, seen.name, problem)


class LockTable(Protocol):
    """HAMi's node locks, kept by their protocol's home (hami.service.nodelock.table.NodeLocks,
    the only copy): the cache forwards it every Node it is shown, and reads back the pod each
    node's lock names."""

    def seen(self, node: Mapping[str, Any]) -> None: ...

    def gone(self, node: Mapping[str, Any]) -> None: ...

    def holder(self, node: str) -> tuple[str, str] | None: ...

    def listen(self, moved: Callable[[str], None]) -> None: ...
