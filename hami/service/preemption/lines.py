"""`hami explain`'s lines on GPU preemption: what it does, or what it would do with
--preemption, and what kube-scheduler's own preemption said."""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from hami.cache.store import ClusterCache
from hami.engine.pdb import parse_budget
from hami.engine.policy import Defaults, PolicyError
from hami.engine.preempt import Preemption, Preemptor
from hami.engine.requests import RequestError, ResourceDefaults
from hami.service.placement import Placement, PodRef
from hami.service.preemption.facts import NEVER, PodFacts, preemptor_of
from hami.service.preemption.plan import at_once, field


def describe(plan: Preemption | None, pod: Preemptor, head: str = "preemption") -> list[str]:
    """`hami explain`'s lines on GPU preemption: the victims and why these. `head` starts the
    first line: what the scheduler does, or what it would do with --preemption."""
    if pod.policy == NEVER:
        return ["  preemption: never (preemptionPolicy: Never)"]
    if plan is None:
        return [
            f"  {head}: none helps: no GPU pod of priority below {pod.priority} "
            "frees enough of a card on any node"
        ]
    top = max(v.priority for v in plan.victims)
    lines = [
        f"  {head}: evict {len(plan.victims)} pod(s) on node "
        f"{plan.node}; it then fits on cards "
        + ", ".join(sorted({d.uuid for c in plan.devices for d in c}))
    ]
    for v in plan.victims:
        took = ", ".join(f"{u.usedmem} MiB of {uuid}" for uuid, u in sorted(v.usage.items()))
        pdb = ", its PodDisruptionBudget forbids it (eviction will be refused)"
        lines.append(
            f"    {v.namespace}/{v.name}: priority {v.priority} < {pod.priority}, holds {took}"
            + (pdb if v.violates_pdb else "")
        )
    lines.append(
        f"    why: no smaller set of lower-priority pods makes room there; node chosen by "
        f"kube-scheduler's order: {plan.pdb_violations} PDB violation(s), highest victim "
        f"priority {top}, {len(plan.victims)} victim(s)"
    )
    return lines


def kube_scheduler_words(pod: Mapping[str, Any]) -> str | None:
    """What kube-scheduler's own preemption said about the pod: the `preemption: ...` end of its
    PodScheduled condition (`0/1 nodes are available: 1 No preemption victims found for
    incoming pod.`), None before it has tried."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        message = str(condition.get("message") or "")
        if condition.get("type") == "PodScheduled" and "preemption: " in message:
            return message[message.rindex("preemption: ") + len("preemption: ") :]
    return None


def preemption_lines(
    cache: ClusterCache,
    pods: Iterable[Mapping[str, Any]],
    budgets: Sequence[Mapping[str, Any]] | None,
    pod: Mapping[str, Any],
    policies: Defaults,
    resources: ResourceDefaults,
    *,
    enabled: bool = False,
) -> list[str]:
    """For `hami explain`, a pending GPU pod that fits nowhere: with GPU preemption on
    (`enabled`, as `hami serve --preemption`), what it does; off (HAMi's behaviour), what
    kube-scheduler's own preemption said, in its words, then what `--preemption` would do."""
    if (pod.get("spec") or {}).get("nodeName"):
        return []
    placement = Placement(cache, policies, resources)
    try:
        asked = placement.ask(pod)
    except (PolicyError, RequestError):
        return []
    ref = PodRef.of(pod)
    candidates = sorted(cache.view)
    if asked is None or placement.decide(ref.uid, *asked, candidates, ref.namespace).node:
        return []
    facts = PodFacts()
    facts.replace(pods)
    parsed = [b for b in map(parse_budget, budgets or ()) if b is not None]
    preemptor = replace(
        preemptor_of(pod, *asked, cache.families), quota=cache.quotas.quota(ref.namespace)
    )
    plan = at_once(field(cache, facts, preemptor, ref.uid, candidates, parsed).planning())
    if enabled:
        lines = describe(plan, preemptor, "preemption (hami serve --preemption)")
    else:
        said = kube_scheduler_words(pod)
        lines = [f"  preemption: {said}"] if said is not None and preemptor.policy != NEVER else []
        lines += describe(plan, preemptor, "with hami serve --preemption")
    if budgets is None:
        lines.append(
            "    (PodDisruptionBudgets could not be read: their violations are not counted)"
        )
    return lines
