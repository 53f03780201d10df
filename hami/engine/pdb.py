"""Which preemption victims a PodDisruptionBudget protects, counted as kube-scheduler counts them.

kube-scheduler (defaultpreemption, filterPodsWithPDBViolation) walks a node's
potential victims from the most important down and, for every budget in the
victim's namespace whose selector matches it, takes one disruption off what the
budget allows; a victim that takes a budget below zero violates it. An empty or
missing selector matches nothing, a pod the budget already lists as disrupted
costs nothing, and a selector that cannot be read is skipped.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: frozenset[str]


@dataclass(frozen=True, slots=True)
class Budget:
    namespace: str
    name: str
    labels: Mapping[str, str]  # matchLabels
    requirements: tuple[Requirement, ...]  # matchExpressions
    allowed: int  # status.disruptionsAllowed
    disrupted: frozenset[str]  # status.disruptedPods: names already being evicted

    @property
    def empty(self) -> bool:
        return not self.labels and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.empty:
            return False
        if any(labels.get(k) != v for k, v in self.labels.items()):
            return False
        return all(_holds(r, labels) for r in self.requirements)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A potential victim as the budgets see it."""

    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str]


_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


def _holds(r: Requirement, labels: Mapping[str, str]) -> bool:
    if r.operator == "In":
        return labels.get(r.key) in r.values
    if r.operator == "NotIn":
        return labels.get(r.key) not in r.values
    if r.operator == "Exists":
        return r.key in labels
    return r.key not in labels


def parse_budget(obj: Mapping[str, Any]) -> Budget | None:
    """A policy/v1 PodDisruptionBudget as preemption needs it; None when its selector is unusable."""
    meta = obj.get("metadata") or {}
    selector = (obj.get("spec") or {}).get("selector") or {}
    status = obj.get("status") or {}
    try:
        labels = {str(k): str(v) for k, v in (selector.get("matchLabels") or {}).items()}
        requirements = []
        for e in selector.get("matchExpressions") or ():
            operator = str(e.get("operator", ""))
            values = frozenset(str(v) for v in e.get("values") or ())
            if operator not in _OPERATORS or ((operator in ("In", "NotIn")) != bool(values)):
                return None  # kube-scheduler skips a budget whose selector does not convert
            requirements.append(Requirement(str(e.get("key", "")), operator, values))
        allowed = int(status.get("disruptionsAllowed") or 0)
    except (AttributeError, TypeError, ValueError):
        return None
    return Budget(
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
        labels,
        tuple(requirements),
        allowed,
        frozenset(str(n) for n in status.get("disruptedPods") or {}),
    )


def violations(ordered: Sequence[Candidate], budgets: Iterable[Budget]) -> set[str]:
    """uids of the victims, most important first in `ordered`, whose eviction breaks a budget."""
    by_namespace: dict[str, list[Budget]] = {}
    for b in budgets:
        by_namespace.setdefault(b.namespace, []).append(b)
    left = {id(b): b.allowed for bs in by_namespace.values() for b in bs}
    violating = set()
    for pod in ordered:
        for b in by_namespace.get(pod.namespace, ()):
            if not b.matches(pod.labels) or pod.name in b.disrupted:
                continue
            left[id(b)] -= 1
            if left[id(b)] < 0:
                violating.add(pod.uid)
    return violating
