"""What GPU preemption knows of each placed pod beyond the cards it holds (the cache keeps the
cards): priority, start, labels and grace period, fed by the pod informer."""

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hami.engine.families.registry import Families
from hami.engine.inventory import is_terminal
from hami.engine.model import PodRequest
from hami.engine.policy import PodOptions
from hami.engine.preempt import Preemptor

NEVER = "Never"
DEFAULT_GRACE = 30.0  # seconds: the API server's default terminationGracePeriodSeconds


@dataclass(frozen=True, slots=True)
class Facts:
    """What preemption needs to know of a placed pod beyond the cards it holds."""

    priority: int
    start: float  # seconds since the epoch
    labels: Mapping[str, str]
    grace: float  # terminationGracePeriodSeconds
    terminating: bool  # deletionTimestamp set: it leaves anyway and is no victim


def _seconds(stamp: object) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def priority_of(pod: Mapping[str, Any]) -> int:
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def preemptor_of(
    pod: Mapping[str, Any], request: PodRequest, options: PodOptions, families: Families
) -> Preemptor:
    policy = (pod.get("spec") or {}).get("preemptionPolicy")
    return Preemptor(
        request,
        options,
        priority_of(pod),
        NEVER if policy == NEVER else "PreemptLowerPriority",
        families=families,
    )


def facts_of(pod: Mapping[str, Any]) -> Facts:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    grace = spec.get("terminationGracePeriodSeconds")
    # kube-scheduler takes status.startTime; a pod bound but not started counts as just started.
    start = _seconds((pod.get("status") or {}).get("startTime"))
    labels = meta.get("labels")
    return Facts(
        priority_of(pod),
        start if start is not None else float("inf"),
        {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
        float(grace)
        if isinstance(grace, int | float) and not isinstance(grace, bool)
        else DEFAULT_GRACE,
        bool(meta.get("deletionTimestamp")),
    )


class PodFacts:
    """uid -> Facts of every live pod placed on a node; fed by the pod informer."""

    def __init__(self) -> None:
        self._facts: dict[str, Facts] = {}
        # How many placed pods have each priority: a pod no placed pod is below of (most
        # pending pods, in a cluster without priorities) is answered without a scan.
        self._priorities: Counter[int] = Counter()

    def replace(self, pods: Iterable[Mapping[str, Any]]) -> None:
        self._facts.clear()
        self._priorities.clear()
        for pod in pods:
            self.upsert(pod)

    def upsert(self, pod: Mapping[str, Any]) -> None:
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        self._drop(uid)
        if (pod.get("spec") or {}).get("nodeName") and not is_terminal(pod):
            f = self._facts[uid] = facts_of(pod)
            self._priorities[f.priority] += 1

    def delete(self, pod: Mapping[str, Any]) -> None:
        self._drop(str((pod.get("metadata") or {}).get("uid", "")))

    def _drop(self, uid: str) -> None:
        f = self._facts.pop(uid, None)
        if f is not None:
            self._priorities[f.priority] -= 1
            if not self._priorities[f.priority]:
                del self._priorities[f.priority]

    def get(self, uid: str) -> Facts | None:
        return self._facts.get(uid)

    def any_below(self, priority: int) -> bool:
        return any(p < priority for p in self._priorities)
