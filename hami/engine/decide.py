"""Choosing a node and cards for a pod: the one decision every adapter shares."""

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from hami.engine import reasons as r
from hami.engine.codec import encode_pod_devices
from hami.engine.fit import fit_pod
from hami.engine.model import Card, NodeState, PodDevices, PodRequest
from hami.engine.policy import PodOptions


@dataclass(frozen=True, slots=True)
class CardScores:
    """The score of every card of one node, computed before fitting one container."""

    node: str
    container: int  # index in the allocation (init containers first)
    cards: tuple[Card, ...]
    scores: tuple[float, ...]

    def items(self) -> Iterator[tuple[str, float]]:
        return zip((c.info.id for c in self.cards), self.scores, strict=True)


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


def node_order(nodes: Iterable[NodeState], node_policy: str) -> list[NodeState]:
    """Nodes in preference order: binpack takes the busiest, spread the idlest, names break ties."""
    if node_policy == "spread":
        return sorted(nodes, key=lambda n: (n.score, n.name))
    return sorted(nodes, key=lambda n: (-n.score, n.name))


def schedule(
    cluster: Mapping[str, NodeState],
    request: PodRequest,
    options: PodOptions,
    candidates: Iterable[str] | None = None,
) -> Decision:
    """Place the pod on the most preferred node where every container fits.

    HAMi fits every node and then sorts the ones that fit; trying nodes in
    sorted order and stopping at the first fit gives the same answer without
    fitting nodes that could never win.
    """
    names = list(cluster) if candidates is None else list(candidates)
    failed: dict[str, str] = {}
    known = []
    for name in names:
        node = cluster.get(name)
        if node is None:
            failed[name] = r.NODE_UNREGISTERED
        else:
            known.append(node)
    scores: list[CardScores] = []
    key = hash((request, options))
    for node in node_order(known, options.node_policy):
        fit = fit_pod(node, request, options, key)
        scores.extend(CardScores(node.name, c, node.cards, s) for c, s in fit.scores)
        if fit.devices is not None:
            return Decision(node.name, fit.devices, failed, tuple(scores), node.score)
        failed[node.name] = fit.reason
    return Decision(None, None, failed, tuple(scores))
