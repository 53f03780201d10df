"""Per-namespace GPU quotas: the limits from ResourceQuota objects and what each namespace holds.

The limits come from a ResourceQuota informer; the usage is kept incrementally by
ClusterCache, which adds and removes each pod's (or reservation's) allocation as it
counts it on the cards, so a filter reads a namespace's usage without summing pods.
"""

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from hami.engine.families.registry import Families
from hami.engine.familyquota import FamilyQuota, family_limits, tightest
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
        *,
        names: ResourceNames = ResourceNames(),
        memory_factor: int = 1,
        on_loosened: Loosened | None = None,
        families: Families,
    ) -> None:
        self._names = names
        self._memory_factor = memory_factor
        self._on_loosened = on_loosened
        self._objects: dict[str, tuple[str, QuotaLimits]] = {}  # uid -> (namespace, limits)
        self._limits: dict[str, QuotaLimits] = {}  # namespace -> all its quotas together
        self._used: dict[str, QuotaUsage] = {}
        # The other families' memory and core resources, by resource name (hami.engine.familyquota).
        self._families = families
        self._family_objects: dict[str, tuple[str, dict[str, int]]] = {}
        self._family_limits: dict[str, dict[str, int]] = {}
        self._family_used: dict[str, dict[str, int]] = {}

    # --- ResourceQuota objects (an informer's sink) ------------------------------------------

    def replace(self, objects: Iterable[Mapping[str, Any]]) -> None:
        gone = {*self._objects, *self._family_objects}
        for obj in objects:
            gone.discard(self._uid(obj))
            self.upsert(obj)
        for uid in gone:
            self._forget(uid)

    def upsert(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        hard = (obj.get("spec") or {}).get("hard") or {}
        limits = quota_limits(hard, self._names)
        uid = self._uid(obj)
        self._family_upsert(uid, namespace, family_limits(hard, self._families))
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
        self._forget(self._uid(obj))

    def _forget(self, uid: str) -> None:
        self._family_upsert(uid, "", {})
        self._drop(uid)

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

    def _family_upsert(self, uid: str, namespace: str, limits: dict[str, int]) -> None:
        old = self._family_objects.pop(uid, None)
        if limits:
            self._family_objects[uid] = (namespace, limits)
        for ns in {namespace, old[0] if old else namespace} - {""}:
            before = self._family_limits.pop(ns, {})
            after = tightest(lim for n, lim in self._family_objects.values() if n == ns)
            if after:
                self._family_limits[ns] = after
            loosened = any(after.get(r, v + 1) > v for r, v in before.items())
            if loosened and self._on_loosened is not None:
                self._on_loosened(ns)

    # --- usage (ClusterCache's bookkeeping) --------------------------------------------------

    def add_families(self, namespace: str, amounts: Mapping[str, int], sign: int = 1) -> None:
        """Add (sign > 0) or remove what a pod holds of the other families' resources."""
        used = self._family_used.setdefault(namespace, {})
        for name, amount in amounts.items():
            total = used.get(name, 0) + sign * amount
            if total:
                used[name] = total
            else:
                used.pop(name, None)
        if not used:
            self._family_used.pop(namespace, None)

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

    def family_quota(self, namespace: str) -> FamilyQuota | None:
        """The namespace's family limits and usage, or None where no ResourceQuota limits them."""
        limits = self._family_limits.get(namespace)
        if limits is None:
            return None
        return FamilyQuota(limits, dict(self._family_used.get(namespace, {})))

    def used(self, namespace: str) -> QuotaUsage:
        return self._used.get(namespace, QuotaUsage())

    def lines(self) -> Iterator[QuotaLine]:
        """Every namespace that holds GPUs or has a GPU limit, per resource, sorted."""
        for namespace in sorted({*self._limits, *self._used}):
            limits = self._limits.get(namespace, QuotaLimits())
            used = self.used(namespace)
            yield QuotaLine(namespace, self._names.memory, limits.memory, used.memory)
            yield QuotaLine(namespace, self._names.cores, limits.cores, used.cores)
        for namespace in sorted({*self._family_limits, *self._family_used}):
            limits_of = self._family_limits.get(namespace, {})
            used_of = self._family_used.get(namespace, {})
            for name in sorted({*limits_of, *used_of}):
                yield QuotaLine(namespace, name, limits_of.get(name), used_of.get(name, 0))


def _looser(after: QuotaLimits, before: QuotaLimits) -> bool:
    def more(a: int | None, b: int | None) -> bool:
        return b is not None and (a is None or a > b)

    return more(after.memory, before.memory) or more(after.cores, before.cores)
