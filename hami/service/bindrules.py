"""What a bind may conclude from the pod itself, read back after a call went wrong.

The answer to a failed call is not the truth about what happened: a Binding
whose answer was lost to a timeout or a dropped connection may have
committed, and a 409 may be an earlier attempt of this very bind. kube-
scheduler's contract (assume, bind, forget on failure) and HAMi's device
plugin both rely on a bound pod carrying exactly its node's allocation, so a
bind decides what to report and what to undo from the pod as the API server
holds it, here, and never from the error alone.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import Any


class Found(Enum):
    BOUND_HERE = "bound-here"  # the bind happened (a lost answer, or our earlier attempt)
    BOUND_ELSEWHERE = "bound-elsewhere"  # someone else's bind won: touch nothing of the pod
    GONE = "gone"  # deleted, or a new pod under the same name
    DELETING = "deleting"  # the API server refuses to bind a pod that is being deleted
    UNBOUND = "unbound"  # the Binding did not happen


@dataclass(frozen=True, slots=True)
class PodState:
    found: Found
    node: str = ""  # spec.nodeName when bound
    resource_version: str = ""  # the pod's, as read


def read_back(pod: Mapping[str, Any] | None, uid: str, node: str) -> PodState:
    """Where the pod stands for a bind of `uid` to `node`; `pod` is None when it is not found."""
    if pod is None:
        return PodState(Found.GONE)
    metadata = pod.get("metadata") or {}
    if uid and metadata.get("uid") != uid:
        return PodState(Found.GONE)
    bound_to = str((pod.get("spec") or {}).get("nodeName") or "")
    rv = str(metadata.get("resourceVersion") or "")
    if bound_to == node:
        return PodState(Found.BOUND_HERE, bound_to, rv)
    if bound_to:
        return PodState(Found.BOUND_ELSEWHERE, bound_to, rv)
    if metadata.get("deletionTimestamp"):
        return PodState(Found.DELETING, resource_version=rv)
    return PodState(Found.UNBOUND, resource_version=rv)


@dataclass(frozen=True, slots=True)
class Budget:
    """How a bind spends the time kube-scheduler gives it (the extender's httpTimeout).

    `total` ends the bind with an answer before kube-scheduler gives up on it and sends
    the pod to another bind; `verify` is kept back to read the pod after an unanswered
    Binding; `binding` is the least a Binding is sent with; `write` caps any one write.
    """

    total: float
    verify: float
    binding: float
    write: float

    @classmethod
    def within(cls, http_timeout: timedelta, write: float) -> "Budget":
        """Budget for kube-scheduler's extender `http_timeout`: a tenth of it, 1 to 5 s, is
        left for the answer to travel and be read; the remainder is the bind's."""
        timeout = http_timeout.total_seconds()
        if timeout <= 0:
            raise ValueError("the extender's httpTimeout must be positive")
        total = timeout - min(5.0, max(1.0, timeout / 10))
        if total <= 0:
            raise ValueError(f"an extender httpTimeout of {timeout:g}s leaves a bind no time")
        write = min(write, total / 3)
        return cls(total=total, verify=write, binding=write, write=write)

    @property
    def lock_wait(self) -> float:
        """The longest a bind can wait for a node lock and still post its Binding."""
        return max(0.0, self.total - self.verify - self.binding)


def go_duration(text: str) -> timedelta:
    """A Go duration as kube-scheduler's configuration writes it (`30s`, `1m30s`, `1500ms`)."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    rest = text.strip()
    if not rest:
        raise ValueError("an empty duration")
    seconds = 0.0
    while rest:
        digits = len(rest) - len(rest.lstrip("0123456789."))
        if digits == 0:
            raise ValueError(f"{text!r} is not a Go duration such as 30s or 1m30s")
        number, rest = rest[:digits], rest[digits:]
        unit = next((u for u in ("ms", "us", "µs", "ns", "h", "m", "s") if rest.startswith(u)), "")
        if not unit:
            raise ValueError(f"{text!r}: a unit (h, m, s, ms) must follow {number}")
        try:
            seconds += float(number) * units[unit]
        except ValueError:
            raise ValueError(f"{text!r} is not a Go duration such as 30s or 1m30s") from None
        rest = rest[len(unit) :]
    return timedelta(seconds=seconds)
