"""The preemption decision, composed once: which lower-priority GPU pods a pending GPU pod would
evict, and where.

The rules are hami.engine.preempt's; this module feeds them what the cache does not keep (each
placed pod's facts, hami.service.preemption.facts) and the PodDisruptionBudgets.
`Field.planning`, over `field`'s candidates, is the decision; `paced` runs it on the event loop
(hami serve), handing the loop back between nodes; `at_once` runs it without (hami explain,
and the re-check of a chosen node).
"""

import asyncio
import itertools
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass

from hami.cache.store import ClusterCache
from hami.engine.inventory import PodAllocation
from hami.engine.model import NodeState
from hami.engine.pdb import Budget, Candidate, violations
from hami.engine.preempt import Preemption, Preemptor, Victim, choose, dry_runs, without
from hami.engine.state import held, mig_cards
from hami.service.preemption.facts import NEVER, Facts, PodFacts

# A dry run costs about a millisecond a node: hami serve hands the event loop back this often.
NODES_PER_TURN = 16


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

    def planning(self) -> "Planned":
        """The decision: the node and victims for the pod (kube-scheduler's choice among the
        dry runs' plans), or None. A generator that yields after each node's dry run, so that
        a caller on the event loop can hand it back between nodes; its return value is the
        plan."""
        plans: list[Preemption] = []
        for found in dry_runs(self.names, self.node, self.pod, self.nodes):
            if found is not None:
                plans.append(found)
            yield
        return choose(plans)

    def node(self, name: str) -> tuple[NodeState, Sequence[Victim]]:
        node = self.view[name]
        mig = mig_cards(node)
        gone = [_victim(a, f, mig) for a in self.gone.get(name, ()) if (f := self.facts.get(a.uid))]
        lower = [(_victim(a, f, mig), f) for a, f in self.lower[name]]
        return without(node, gone, self.pod.families), _with_budgets(lower, self.budgets)


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
) -> Field:
    """The candidates as the engine needs them (none when no node has a victim).

    `doomed` are victims of plans under way: their cards are already promised to
    another preemptor's hold, which the cache counts, so they count as gone and are
    no one's victims again. A terminating pod leaves by itself and is no victim.
    """
    if pod.policy == NEVER or not facts.any_below(pod.priority):
        candidates = ()
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


# The decision's steps: one per node dry-run, then the plan as the generator's return value.
Planned = Generator[None, None, Preemption | None]


def at_once(steps: Planned) -> Preemption | None:
    """The plan of `Field.planning`'s steps, taken without handing anything back."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: Preemption | None = done.value
            return result


async def paced(steps: Planned) -> Preemption | None:
    """The plan of `Field.planning`'s steps, handing the event loop back every NODES_PER_TURN nodes:
    filters must not wait for a hundred dry runs."""
    for turn in itertools.count(1):
        try:
            next(steps)
        except StopIteration as done:
            result: Preemption | None = done.value
            return result
        if turn % NODES_PER_TURN == 0:
            await asyncio.sleep(0)
    raise AssertionError("unreachable: itertools.count never ends")
