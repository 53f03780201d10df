"""Per-namespace GPU quotas: the limits from ResourceQuota objects and what each namespace holds.

The limits come from a ResourceQuota informer; the usage is kept incrementally by
ClusterCache, which adds and removes each pod's (or reservation's) allocation as it
counts it on the cards, so a filter reads a namespace's usage without summing pods.
"""

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from hami.engine.quota import (
    NamespaceQuota,
    QuotaLimits,
    QuotaUsage,
    combined_limits,
    quota_limits,
)
from hami.engine.requests import ResourceNames

# A namespace whose limits were raised or removed: pods it turned away may fit now.
Loosened = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class QuotaLine:
    """One namespace's limit and usage of one resource, for metrics and `hami explain`."""

    namespace: str
    resource: str
    limit: int | None
    used: int


class QuotaBook:
    def __init__(
        self,
        names: ResourceNames = ResourceNames(),
        memory_factor: int = 1,
        on_loosened: Loosened | None = None,
    ) -> None:
        self._names = names
        self._memory_factor = memory_factor
        self._on_loosened = on_loosened
        self._objects: dict[str, tuple[str, QuotaLimits]] = {}  # uid -> (namespace, limits)
        self._limits: dict[str, QuotaLimits] = {}  # namespace -> all its quotas together
        self._used: dict[str, QuotaUsage] = {}

    # --- ResourceQuota objects (an informer's sink) ------------------------------------------

    def replace(self, objects: Iterable[Mapping[str, Any]]) -> None:
        gone = set(self._objects)
        for obj in objects:
            gone.discard(self._uid(obj))
            self.upsert(obj)
        for uid in gone:
            self._drop(uid)

    def upsert(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        limits = quota_limits((obj.get("spec") or {}).get("hard") or {}, self._names)
        uid = self._uid(obj)
        old = self._objects.get(uid)
        if limits.empty:
            if old is not None:
                self._drop(uid)
            return
        self._objects[uid] = (namespace, limits)
        self._recompute(namespace)
        if old is not None and old[0] != namespace:
            self._recompute(old[0])

    def delete(self, obj: Mapping[str, Any]) -> None:
        self._drop(self._uid(obj))

    @staticmethod
    def _uid(obj: Mapping[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")

    def _drop(self, uid: str) -> None:
        old = self._objects.pop(uid, None)
        if old is not None:
            self._recompute(old[0])

    def _recompute(self, namespace: str) -> None:
        before = self._limits.get(namespace, QuotaLimits())
        after = combined_limits(lim for ns, lim in self._objects.values() if ns == namespace)
        if after.empty:
            self._limits.pop(namespace, None)
        else:
            self._limits[namespace] = after
        if self._on_loosened is not None and _looser(after, before):
            self._on_loosened(namespace)

    # --- usage (ClusterCache's bookkeeping) --------------------------------------------------

    def add(self, namespace: str, usage: QuotaUsage) -> None:
        total = self._used.get(namespace, QuotaUsage()) + usage
        if total == QuotaUsage():
            self._used.pop(namespace, None)
        else:
            self._used[namespace] = total

    def remove(self, namespace: str, usage: QuotaUsage) -> None:
        self.add(namespace, QuotaUsage() - usage)

    # --- reading ------------------------------------------------------------------------------

    def quota(self, namespace: str) -> NamespaceQuota | None:
        """The namespace's limits and usage, or None where no ResourceQuota limits its GPUs."""
        limits = self._limits.get(namespace)
        if limits is None:
            return None
        return NamespaceQuota(limits, self.used(namespace), self._memory_factor)

    def used(self, namespace: str) -> QuotaUsage:
        return self._used.get(namespace, QuotaUsage())

    def lines(self) -> Iterator[QuotaLine]:
        """Every namespace that holds GPUs or has a GPU limit, per resource, sorted."""
        for namespace in sorted({*self._limits, *self._used}):
            limits = self._limits.get(namespace, QuotaLimits())
            used = self.used(namespace)
            yield QuotaLine(namespace, self._names.memory, limits.memory, used.memory)
            yield QuotaLine(namespace, self._names.cores, limits.cores, used.cores)


def _looser(after: QuotaLimits, before: QuotaLimits) -> bool:
    def more(a: int | None, b: int | None) -> bool:
        return b is not None and (a is None or a > b)

    return more(after.memory, before.memory) or more(after.cores, before.cores)
