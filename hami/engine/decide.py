"""Choosing a node and cards for a pod: the one decision every adapter shares."""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple

from hami.engine import reasons as r
from hami.engine.codec import encode_pod_devices
from hami.engine.families.registry import Families
from hami.engine.familyfit import NodeFitted, fit_node
from hami.engine.model import CardScores, NodeState, PodDevices, PodRequest
from hami.engine.policy import NodePolicy, PodOptions
from hami.engine.quota import NamespaceQuota


@dataclass(frozen=True, slots=True)
class Decision:
    """Where the pod goes, or why it cannot go anywhere.

    `failed` holds the reason for every node that was tried and rejected,
    `scores` every card score computed on the way, for the score log and for
    explaining a pending pod.
    """

    node: str | None
    devices: PodDevices | None
    failed: Mapping[str, str]
    scores: tuple[CardScores, ...]
    node_score: float | None = None

    @property
    def allocation(self) -> str | None:
        return None if self.devices is None else encode_pod_devices(self.devices)


_NAME = attrgetter("name")


class NodeOrder(NamedTuple):
    """How a node policy orders the nodes that fit: by which score (a node's score for a pod
    asking none of the other families: NodeState.binpack_rank), and whether the highest first."""

    rank: Callable[[NodeState], float]
    busiest_first: bool


# One scorer per node policy, as kube-scheduler's scoring strategies: a policy outside the
# table is a KeyError (its name is refused at start, hami.engine.policy.parse_node_policy),
# never another policy's order.
ORDERS: Mapping[NodePolicy, NodeOrder] = {
    NodePolicy.BINPACK: NodeOrder(attrgetter("binpack_rank"), True),
    NodePolicy.SPREAD: NodeOrder(attrgetter("spread_rank"), False),
}


def node_order(nodes: Iterable[NodeState], node_policy: NodePolicy) -> list[NodeState]:
    """Nodes in preference order for a pod asking NVIDIA's cards alone: binpack takes the
    busiest, spread the idlest (by the score HAMi gives them, with the other families' on
    the node: NodeState.binpack_rank), names break ties.

    Two stable sorts on one attribute each (a reversed sort keeps ties in order)
    instead of one on a tuple built per node: a third of the time for 1,000 nodes.
    """
    by_name = sorted(nodes, key=attrgetter("name"))
    # NodePolicy(...): a policy outside the vocabulary is an error, never binpack by default.
    order = ORDERS[NodePolicy(node_policy)]
    return sorted(by_name, key=order.rank, reverse=order.busiest_first)


def schedule(
    cluster: Mapping[str, NodeState],
    request: PodRequest,
    options: PodOptions,
    candidates: Iterable[str] | None = None,
    quota: NamespaceQuota | None = None,
    *,
    families: Families,
) -> Decision:
    """Place the pod on the most preferred node where every container fits.

    Every node is fitted by one function over every family (fit_node). HAMi fits every node
    and then sorts the ones that fit. For a pod asking only families that offer FastPath
    (hami.engine.families.base), whose node score is known before fitting, trying nodes in
    sorted order and stopping at the first fit gives the same answer without fitting nodes
    that could never win, and a node whose summary shows that the pod cannot fit is turned
    down with the reason fitting it would give, without walking its cards.
    """
    names = list(cluster) if candidates is None else list(candidates)
    failed: dict[str, str] = {}
    # Looked up in C: at 5,000 candidates a loop of lookups was a millisecond.
    known = list(filter(None, map(cluster.get, names)))
    if len(known) < len(names):
        failed.update((name, r.NODE_UNREGISTERED) for name in names if name not in cluster)
    ask = _Ask(request, options, quota, families, hash((request, options, quota)))
    fast = families.fast_types
    if any(a.type not in fast for asks in request.families for a in asks):
        return _best_fit(known, ask, failed)
    return _first_fit(known, ask, failed)


class _Ask(NamedTuple):
    """One decision's pod, what it is fitted with, and `key`, hash((request, options, quota)),
    computed once for every node's memo."""

    request: PodRequest
    options: PodOptions
    quota: NamespaceQuota | None
    families: Families
    key: int

    def fit(self, node: NodeState) -> NodeFitted:
        return fit_node(node, self.request, self.options, self.families, self.key, self.quota)


def _first_fit(known: list[NodeState], ask: _Ask, failed: dict[str, str]) -> Decision:
    """schedule for a pod asking only FastPath families: nodes in policy order, the first that
    fits wins. The first FastPath family's summaries turn nodes down unwalked: its reason is
    the one fitting the node would give first."""
    scores: list[CardScores] = []
    fast = ask.families.fast
    summaries = fast[0].summaries(ask.request, ask.options, ask.quota) if fast else None
    if summaries is not None:
        every = summaries.nowhere(known)
        if every is not None:
            # Every node is turned down: the answer needs no preference order.
            texts, logged = every
            failed.update(zip(map(_NAME, known), texts, strict=True))
            return Decision(None, None, failed, tuple(logged))
    turned_down = None if summaries is None else summaries.check
    rank = ORDERS[NodePolicy(ask.options.node_policy)].rank
    for node in node_order(known, ask.options.node_policy):
        reason = None if turned_down is None else turned_down(node, scores)
        if reason is not None:
            failed[node.name] = reason
            continue
        fit = ask.fit(node)
        scores.extend(fit.scores)
        if fit.devices is not None:
            return Decision(node.name, fit.devices, failed, tuple(scores), rank(node))
        failed[node.name] = fit.reason
    return Decision(None, None, failed, tuple(scores))


def _best_fit(known: list[NodeState], ask: _Ask, failed: dict[str, str]) -> Decision:
    """schedule for a pod asking a family without FastPath: every node is fitted, and the
    nodes that fit are ordered by HAMi's node score with each family's ScoreNode added (which
    depends on the devices chosen, so no node can be skipped)."""
    scores: list[CardScores] = []
    fits: list[tuple[NodeState, PodDevices, float]] = []
    for node in known:
        fit = ask.fit(node)
        scores.extend(fit.scores)
        if fit.devices is None:
            failed[node.name] = fit.reason
            continue
        fits.append((node, fit.devices, node.score + fit.score))
    by_name = sorted(fits, key=lambda f: f[0].name)
    busiest_first = ORDERS[NodePolicy(ask.options.node_policy)].busiest_first
    ranked = sorted(by_name, key=lambda f: f[2], reverse=busiest_first)
    if not ranked:
        return Decision(None, None, failed, tuple(scores))
    node, devices, score = ranked[0]
    return Decision(node.name, devices, failed, tuple(scores), score)
