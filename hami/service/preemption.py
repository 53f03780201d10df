"""GPU-aware preemption: which lower-priority GPU pods a pending GPU pod would evict, and where.

kube-scheduler cannot do this itself: its preemption dry run runs only the
in-tree filters, which do not see card slices, so it never finds a victim
(kubernetes #139270). The decision is hami.engine.preempt's; this module feeds
it what the cache does not keep (each placed pod's priority, start, labels and
grace period) and the PodDisruptionBudgets, and explains the result.
"""

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from hami.cache.store import ClusterCache
from hami.engine.inventory import PodAllocation, is_terminal
from hami.engine.model import NodeState, PodRequest
from hami.engine.pdb import Budget, Candidate, parse_budget, violations
from hami.engine.policy import Defaults, PodOptions, PolicyError
from hami.engine.preempt import Preemption, Preemptor, Victim, choose, dry_runs, without
from hami.engine.requests import RequestError, ResourceDefaults
from hami.engine.state import held, mig_cards
from hami.service.placement import Placement, PodRef

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


def preemptor_of(pod: Mapping[str, Any], request: PodRequest, options: PodOptions) -> Preemptor:
    policy = (pod.get("spec") or {}).get("preemptionPolicy")
    return Preemptor(
        request, options, priority_of(pod), NEVER if policy == NEVER else "PreemptLowerPriority"
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


@dataclass(frozen=True, slots=True)
class Field:
    """What a plan is made over: the candidate nodes with victims, in the order given; a
    node's state and victims are built only when the dry run reaches it."""

    names: list[str]
    view: Mapping[str, NodeState]
    gone: Mapping[str, list[PodAllocation]]
    lower: Mapping[str, list[tuple[PodAllocation, Facts]]]
    budgets: Sequence[Budget]
    facts: PodFacts
    pod: Preemptor
    nodes: int  # how many nodes kube-scheduler passed (hami.engine.preempt.enough)

    def dry_runs(self) -> Iterator[Preemption | None]:
        return dry_runs(self.names, self.node, self.pod, self.nodes)

    def plan(self) -> Preemption | None:
        """The node and victims for the pod, or None."""
        return choose([p for p in self.dry_runs() if p is not None])

    def node(self, name: str) -> tuple[NodeState, Sequence[Victim]]:
        node = self.view[name]
        mig = mig_cards(node)
        gone = [_victim(a, f, mig) for a in self.gone.get(name, ()) if (f := self.facts.get(a.uid))]
        lower = [(_victim(a, f, mig), f) for a, f in self.lower[name]]
        return without(node, gone), _with_budgets(lower, self.budgets)


def _victim(alloc: PodAllocation, f: Facts, mig: frozenset[str]) -> Victim:
    # Counted as the cache counts it, MIG instances included, so removing it frees its slices.
    usage = held(alloc, mig)
    return Victim(alloc.uid, alloc.namespace, alloc.name, f.priority, f.start, usage)


def field(
    cache: ClusterCache,
    facts: PodFacts,
    pod: Preemptor,
    uid: str,
    candidates: Sequence[str],
    budgets: Sequence[Budget] = (),
    doomed: frozenset[str] = frozenset(),
) -> Field | None:
    """The candidates as the engine needs them, or None when no node has a victim.

    `doomed` are victims of plans under way: their cards are already promised to
    another preemptor's hold, which the cache counts, so they count as gone and are
    no one's victims again. A terminating pod leaves by itself and is no victim.
    """
    if pod.policy == NEVER or not facts.any_below(pod.priority):
        return None
    wanted = set(candidates)
    gone: dict[str, list[PodAllocation]] = {}
    lower: dict[str, list[tuple[PodAllocation, Facts]]] = {}
    for alloc in cache.pods():
        if alloc.node not in wanted or alloc.uid == uid:
            continue
        f = facts.get(alloc.uid)
        if f is None:
            continue  # not on a node yet: bound pods only are victims, as in kube-scheduler
        if alloc.uid in doomed:
            gone.setdefault(alloc.node, []).append(alloc)
        elif f.priority < pod.priority and not f.terminating:
            lower.setdefault(alloc.node, []).append((alloc, f))
    names = [n for n in candidates if n in lower and n in cache.view]
    if not names:
        return None
    return Field(names, cache.view, gone, lower, budgets, facts, pod, len(candidates))


def _with_budgets(pods: list[tuple[Victim, Facts]], budgets: Sequence[Budget]) -> list[Victim]:
    # kube-scheduler counts budgets over the node's potential victims, most important first.
    ordered = sorted(pods, key=lambda p: (-p[0].priority, p[0].start, p[0].uid))
    if not budgets:
        return [v for v, _ in ordered]
    broken = violations(
        [Candidate(v.uid, v.namespace, v.name, f.labels) for v, f in ordered], budgets
    )
    return [
        Victim(v.uid, v.namespace, v.name, v.priority, v.start, v.usage, v.uid in broken)
        for v, _ in ordered
    ]


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
    policies: Defaults = Defaults(),
    resources: ResourceDefaults = ResourceDefaults(),
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
    preemptor = replace(preemptor_of(pod, *asked), quota=cache.quotas.quota(ref.namespace))
    f = field(cache, facts, preemptor, ref.uid, candidates, parsed)
    plan = None if f is None else f.plan()
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
