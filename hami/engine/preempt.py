"""Which lower-priority GPU pods to evict so that a pod that fits nowhere fits somewhere.

kube-scheduler's own preemption cannot do this for card slices: its dry run
runs only the in-tree filters, which do not see `nvidia.com/gpumem`, so it
never finds that removing a pod helps (kubernetes #139270). This module
answers the same question with the GPU fit, following kube-scheduler's rules
(pkg/scheduler/framework/preemption and defaultpreemption):

* per node, every pod of lower priority is a potential victim; with all of
  them gone the preemptor must fit, or the node is no candidate;
* victims are then reprieved one by one, those whose eviction would violate
  a PodDisruptionBudget first, each group highest priority first (then the
  one that started first), and a reprieved pod stays if the preemptor still
  fits, so no single victim of the result could be spared;
* among candidate nodes the chosen one has the fewest PDB violations, then
  the lowest highest victim priority, then the smallest sum of victim
  priorities, then the fewest victims, then the latest start among its
  highest-priority victims, then the earliest in the order given.

Pure: the caller supplies the node states, each running pod's usage and
facts (priority, start time, whether a PDB forbids evicting it).
"""

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from hami.engine.families.registry import Families
from hami.engine.familyfit import fit_node
from hami.engine.model import NodeState, PodDevices, PodRequest, Usage
from hami.engine.policy import PodOptions
from hami.engine.quota import NamespaceQuota
from hami.engine.state import build_node


@dataclass(frozen=True, slots=True)
class Victim:
    """A running GPU pod on a node, as preemption needs to know it."""

    uid: str
    namespace: str
    name: str
    priority: int
    start: float  # seconds since the epoch; later is younger
    usage: Mapping[str, Usage]  # uuid -> what it takes from each card
    violates_pdb: bool = False  # evicting it now would break a PodDisruptionBudget


@dataclass(frozen=True, slots=True)
class Preemption:
    node: str
    victims: tuple[Victim, ...]
    pdb_violations: int
    devices: PodDevices  # where the preemptor fits once the victims are gone


@dataclass(frozen=True, slots=True)
class Preemptor:
    request: PodRequest
    options: PodOptions
    priority: int
    policy: str = "PreemptLowerPriority"  # or "Never" (spec.preemptionPolicy)
    # Its namespace's GPU quota as it stands: victims in that namespace are not counted as
    # giving quota back, so a plan never relies on it (a pod over quota preempts nobody).
    quota: NamespaceQuota | None = None
    # The device families the process schedules (its device config's), for a pod asking them.
    families: Families = field(kw_only=True)


def without(node: NodeState, gone: Iterable[Victim], families: Families) -> NodeState:
    usage = {c.info.id: c.usage for c in node.all_cards()}
    for victim in gone:
        for uuid, u in victim.usage.items():
            if uuid in usage:
                usage[uuid] = usage[uuid] - u
    kinds = [(kind, tuple(c.info for c in cards)) for kind, cards in node.families.items()]
    uids = {v.uid for v in gone}
    holders = {
        card: kept
        for card, pods in node.holders.items()
        if (kept := tuple(p for p in pods if p[0] not in uids))
    }
    return build_node(
        node.name,
        (c.info for c in node.cards),
        usage,
        node.cordoned,
        node.links,
        None,
        kinds,
        holders,
        node.annotations,
        registry=families,
    )


def _fit(node: NodeState, pod: Preemptor) -> PodDevices | None:
    """Where the pod fits on the node: NVIDIA's asks and, for a pod asking them, the other
    families' (without them, a pod asking only a DCU would fit anywhere, and evict for it)."""
    key = hash((pod.request, pod.options, pod.quota))
    return fit_node(node, pod.request, pod.options, pod.families, key, pod.quota).devices


def victims_on(node: NodeState, running: Sequence[Victim], pod: Preemptor) -> Preemption | None:
    """The victims kube-scheduler's rules pick on one node, or None if evicting cannot help."""
    lower = [v for v in running if v.priority < pod.priority]
    devices = _fit(without(node, lower, pod.families), pod) if lower else None
    if devices is None:
        return None
    # Reprieve order: PDB-protected pods first, then higher priority, then the older one.
    order = sorted(lower, key=lambda v: (not v.violates_pdb, -v.priority, v.start, v.uid))
    evicted = list(order)
    for candidate in order:
        trial = [v for v in evicted if v is not candidate]
        fit = _fit(without(node, trial, pod.families), pod)
        if fit is not None:
            evicted, devices = trial, fit
    chosen = tuple(sorted(evicted, key=lambda v: (-v.priority, v.start, v.uid)))
    return Preemption(node.name, chosen, sum(v.violates_pdb for v in chosen), devices)


def _rank(p: Preemption, position: int) -> tuple[float, ...]:
    top = max(v.priority for v in p.victims)
    # kube-scheduler shifts priorities by MaxInt32+1 so that sums of negative ones compare.
    total = sum(v.priority + 2**31 for v in p.victims)
    earliest_top_start = min(v.start for v in p.victims if v.priority == top)
    # The node whose oldest top-priority victim started latest costs the least work lost.
    return (p.pdb_violations, top, total, len(p.victims), -earliest_top_start, position)


def enough(nodes: int, percentage: int = 10, absolute: int = 100) -> int:
    """How many candidate nodes kube-scheduler dry-runs before it chooses (calcNumCandidates,
    DefaultPreemption's minCandidateNodesPercentage and minCandidateNodesAbsolute)."""
    return min(nodes, max(nodes * percentage // 100, absolute))


def choose(plans: Sequence[Preemption]) -> Preemption | None:
    """The plan kube-scheduler's node order prefers; ties go to the earliest in `plans`."""
    ranked = [(_rank(p, position), p) for position, p in enumerate(plans)]
    return min(ranked, key=lambda r: r[0])[1] if ranked else None


def dry_runs(
    candidates: Sequence[str],
    node_of: Callable[[str], tuple[NodeState, Sequence[Victim]] | None],
    pod: Preemptor,
    nodes: int | None = None,
) -> Iterator[Preemption | None]:
    """Each candidate's plan in turn (None where evicting cannot help), until `enough` of
    them (out of `nodes`, by default the candidates) have one, as kube-scheduler stops (it
    starts at a random node; this starts at the first, so identical states give identical
    plans). `node_of` gives a node's state and running pods, built only when it is reached."""
    wanted = enough(len(candidates) if nodes is None else nodes)
    found = 0
    for name in candidates:
        node = node_of(name)
        plan = None if node is None else victims_on(node[0], node[1], pod)
        yield plan
        found += plan is not None
        if found >= wanted:
            return
