"""Per-namespace GPU quotas, as HAMi v2.9+ reads them from ResourceQuota objects.

A ResourceQuota's `spec.hard` may limit `limits.nvidia.com/gpumem` (MiB) and
`limits.nvidia.com/gpucores` (percent of a card's SMs, summed over cards).
kube-apiserver's own quota counts the raw request values, which leaves out
percentages and whole-card defaults; HAMi, and this module, count what the
scheduler actually allocates: a percentage resolved to MiB on the chosen card,
a whole card as its memory. The check runs per candidate card during fitting,
so a pod that would exceed its quota on a 24 GiB card may still fit a 16 GiB one.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hami.engine.model import ContainerDevice, ContainerRequest, PodDevices, PodRequest, Usage
from hami.engine.quantity import QuantityError, as_int64
from hami.engine.requests import ResourceNames
from hami.engine.usage import pod_usage

# HAMi reads only the limits.* form of the keys (pkg/device/quota.go, managedQuotaName).
LIMITS_PREFIX = "limits."
# HAMi's webhook denial for a pod whose request alone is over the namespace's quota.
EXCEEDING_QUOTA = "exceeding resource quota"


@dataclass(frozen=True, slots=True)
class QuotaUsage:
    """GPU memory (MiB, after the memory factor) and cores (percent) one namespace holds."""

    memory: int = 0
    cores: int = 0

    def __add__(self, other: "QuotaUsage") -> "QuotaUsage":
        return QuotaUsage(self.memory + other.memory, self.cores + other.cores)

    def __sub__(self, other: "QuotaUsage") -> "QuotaUsage":
        return QuotaUsage(self.memory - other.memory, self.cores - other.cores)


@dataclass(frozen=True, slots=True)
class QuotaLimits:
    """A namespace's limits as written in its ResourceQuota; None where nothing limits it.

    `memory` is in the units written (MiB); the memory factor is applied when checking,
    as HAMi multiplies the limit by it.
    """

    memory: int | None = None
    cores: int | None = None

    @property
    def empty(self) -> bool:
        return self.memory is None and self.cores is None

    def tighter(self, other: "QuotaLimits") -> "QuotaLimits":
        """Both sets of limits at once: Kubernetes enforces every quota of a namespace."""
        return QuotaLimits(_least(self.memory, other.memory), _least(self.cores, other.cores))


def _least(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def quota_limits(hard: Mapping[str, Any], names: ResourceNames = ResourceNames()) -> QuotaLimits:
    """The GPU limits in a ResourceQuota's `spec.hard`.

    A value that is not a whole number is skipped, as HAMi skips what Go's AsInt64 refuses;
    kube-apiserver has already validated it as a quantity.
    """

    def read(resource: str) -> int | None:
        value = hard.get(LIMITS_PREFIX + resource)
        if value is None:
            return None
        try:
            return as_int64(value)
        except QuantityError:
            return None

    return QuotaLimits(read(names.memory), read(names.cores))


def combined_limits(all_limits: Iterable[QuotaLimits]) -> QuotaLimits:
    out = QuotaLimits()
    for limits in all_limits:
        out = out.tighter(limits)
    return out


def allocation_usage(devices: PodDevices, n_init: int, init_done: bool = False) -> QuotaUsage:
    """What one pod's allocation counts against its namespace's quota.

    The same collapsed usage the cards carry (init containers' peak against the app
    containers' sum, per card), summed over the cards, as HAMi counts it.
    """
    return card_total(pod_usage(devices, n_init, init_done))


def card_total(per_card: Mapping[str, Usage]) -> QuotaUsage:
    """Per-card usage summed over the cards."""
    return QuotaUsage(
        sum(u.usedmem for u in per_card.values()), sum(u.usedcores for u in per_card.values())
    )


@dataclass(frozen=True, slots=True)
class NamespaceQuota:
    """A namespace's limits and what it holds now, excluding the pod being placed."""

    limits: QuotaLimits
    used: QuotaUsage = QuotaUsage()
    memory_factor: int = 1

    def fits(self, pod: QuotaUsage) -> bool:
        """HAMi's FitQuota: used + the pod's total must stay within each limit set.

        An explicit limit of 0 blocks every allocation; an absent one allows any.
        """
        mem, cores = self.limits.memory, self.limits.cores
        if mem is not None and self.used.memory + pod.memory > mem * max(self.memory_factor, 1):
            return False
        return cores is None or self.used.cores + pod.cores <= cores

    def admits(self, devices: PodDevices, n_init: int) -> bool:
        """Whether the pod's allocation so far (possibly partial) keeps the namespace within."""
        return self.fits(allocation_usage(devices, n_init))

    def gate(
        self, before: PodDevices, n_init: int
    ) -> Callable[[tuple[ContainerDevice, ...]], bool]:
        """admits((*before, picked)) for the next container's cards as picked so far.

        Called for every candidate card, so the containers before are summed once: a card
        none of them uses adds its own share whether the container is an init or an app
        one. Only a card shared with an earlier container needs the collapse again.
        """
        per_card = pod_usage(before, n_init)
        base = card_total(per_card)

        def admits(picked: tuple[ContainerDevice, ...]) -> bool:
            if any(d.uuid in per_card for d in picked):
                return self.admits((*before, picked), n_init)
            mem = sum(d.usedmem for d in picked)
            return self.fits(
                QuotaUsage(base.memory + mem, base.cores + sum(d.usedcores for d in picked))
            )

        return admits


def requested_usage(request: PodRequest) -> QuotaUsage:
    """What HAMi's webhook counts before any card is chosen (fitResourceQuota).

    Only explicit MiB and cores count (a percentage or a whole card is 0 until a card is
    chosen); app containers add up, init containers run one at a time, the larger wins.
    """

    def ask(r: ContainerRequest | None) -> QuotaUsage:
        return QuotaUsage() if r is None else QuotaUsage(r.memreq * r.nums, r.coresreq * r.nums)

    apps = [ask(r) for r in request.app]
    inits = [ask(r) for r in request.init]
    return QuotaUsage(
        max(sum(u.memory for u in apps), max((u.memory for u in inits), default=0)),
        max(sum(u.cores for u in apps), max((u.cores for u in inits), default=0)),
    )
