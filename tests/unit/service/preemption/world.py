"""Preemption's world: low-priority pods holding cards of node n, and Placement with
preemption over a cache."""

from collections.abc import Callable, Sequence
from typing import Any

from hami.cache.store import ClusterCache
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.kube.events import EventRecorder
from hami.service.preemption.facts import PodFacts
from hami.service.preemption.preempter import Preempter, PreemptingPlacement
from tests.builders import allocated_pod
from tests.fakes.kubeapi import FakeKube


def preempting(
    kube: FakeKube,
    cache: ClusterCache,
    running: Sequence[dict[str, Any]],
    clock: Callable[[], float],
    seen: list[tuple[str, str]] | None = None,
) -> PreemptingPlacement:
    """Placement with preemption over `cache`, whose `running` pods may be preempted; each
    outcome and reason observed goes to `seen`."""
    facts = PodFacts()
    facts.replace(running)
    observed = [] if seen is None else seen
    preempter = Preempter(
        kube,
        cache,
        facts,
        EventRecorder(kube, rate=0),
        scheduler_name="hami-scheduler",
        hold_seconds=60,
        observe=lambda outcome, reason: observed.append((outcome, reason)),
        clock=clock,
    )
    return PreemptingPlacement(preempter, cache, Defaults(), ResourceDefaults())


def pod(uid: str, card: str, mem: int, priority: int, start: int, **meta: Any) -> dict[str, Any]:
    """allocated_pod at `priority`, started `start` seconds into 2026, labelled tier=low."""
    p = allocated_pod(uid, card, mem)
    p["metadata"].update(labels={"tier": "low"}, **meta)
    p["spec"]["priority"] = priority
    p["status"]["startTime"] = f"2026-01-01T00:00:{start:02d}Z"
    return p


LOW = (pod("a", "GPU-0", 8000, 1, 1), pod("b", "GPU-1", 8000, 1, 2))
