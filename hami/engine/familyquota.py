"""Namespace ResourceQuotas on the other device families' memory and core resources.

HAMi v2.10 (pkg/device/quota.go) manages a `limits.<name>` key of a ResourceQuota for the
memory and core resource of every device family it schedules, not only NVIDIA's (whose
quota is hami.engine.quota's). A family's usage in a namespace is the memory and cores of
its devices the namespace's pods hold, and HAMi's webhook refuses a pod whose asks of a
family (app containers summed, the largest init container if more) would take the
namespace past that family's limits (`exceeding resource quota`). The memory limit is
multiplied by the family's memory factor, as HAMi's FitQuota does.

Amounts are kept by resource name, since each family's names are its own.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hami.engine.families.registry import Families
from hami.engine.model import FamilyRequest, PodRequest
from hami.engine.quantity import QuantityError, as_int64
from hami.engine.quota import LIMITS_PREFIX

Amounts = Mapping[str, int]  # resource name -> MiB or cores


def quota_names(families: Families) -> frozenset[str]:
    """The family resources a ResourceQuota may limit (HAMi's IsManagedQuota)."""
    return frozenset(
        n for f in families.others for n in (f.wire.resources.memory, f.wire.resources.cores) if n
    )


def family_limits(hard: Mapping[str, object], families: Families) -> dict[str, int]:
    """The family limits in a ResourceQuota's `spec.hard`; a value that is not a whole number
    is skipped, as HAMi skips what Go's AsInt64 refuses."""
    out: dict[str, int] = {}
    for name in quota_names(families):
        value = hard.get(LIMITS_PREFIX + name)
        if value is None:
            continue
        try:
            number = as_int64(value)
        except QuantityError:
            continue
        if number is not None:
            out[name] = number
    return out


def tightest(all_limits: Iterable[Amounts]) -> dict[str, int]:
    """Every quota of a namespace at once: the least limit of each resource."""
    out: dict[str, int] = {}
    for limits in all_limits:
        for name, value in limits.items():
            out[name] = min(value, out.get(name, value))
    return out


def card_amounts(usage: Mapping[str, tuple[str, int, int]], families: Families) -> dict[str, int]:
    """What a pod's family cards count: `usage` maps each card to (its family's type, the
    memory and the cores the pod holds of it)."""
    by_type = families.other_by_type()
    out: dict[str, int] = {}
    for kind, memory, cores in usage.values():
        family = by_type.get(kind)
        if family is None:
            continue
        names = family.wire.resources
        for name, amount in ((names.memory, memory), (names.cores, cores)):
            if name and amount:
                out[name] = out.get(name, 0) + amount
    return out


def requested_amounts(request: PodRequest, families: Families) -> dict[str, dict[str, int]]:
    """HAMi's fitResourceQuota: per family type, the memory and cores the pod asks of it
    (app containers summed, init containers one at a time, the larger wins); a family asked
    for neither is left out."""
    n_init = len(request.init)
    out: dict[str, dict[str, int]] = {}
    for family in families.others:
        names = family.wire.resources
        if not names.memory and not names.cores:
            continue
        asks = [_ask(c, family.wire.type) for c in request.families]
        apps, inits = asks[n_init:], asks[:n_init]
        memory = max(sum(m for m, _ in apps), max((m for m, _ in inits), default=0))
        cores = max(sum(c for _, c in apps), max((c for _, c in inits), default=0))
        if memory or cores:
            out[family.wire.type] = {
                n: v for n, v in ((names.memory, memory), (names.cores, cores)) if n
            }
    return out


def _ask(container: tuple[FamilyRequest, ...], kind: str) -> tuple[int, int]:
    memory = sum(r.memreq * r.nums for r in container if r.type == kind)
    cores = sum(r.coresreq * r.nums for r in container if r.type == kind)
    return memory, cores


@dataclass(frozen=True, slots=True)
class FamilyQuota:
    """A namespace's family limits and what it holds of them now."""

    limits: Amounts
    used: Amounts = field(default_factory=dict)

    def fits(self, asked: Mapping[str, Amounts], families: Families) -> bool:
        """HAMi's FitQuota for each family the pod asks of: used + asked within each limit
        set (an explicit 0 blocks), the memory limit times the family's memory factor."""
        by_type = families.other_by_type()
        for kind, amounts in asked.items():
            names = by_type[kind].wire.resources
            factor = max(names.memory_factor, 1)
            for name in (names.memory, names.cores):
                if not name or name not in self.limits:
                    continue
                limit = self.limits[name] * (factor if name == names.memory else 1)
                if self.used.get(name, 0) + amounts.get(name, 0) > limit:
                    return False
        return True
