"""What the other device families on a node add to its score for a pod taking none of
their devices (HAMi's OverrideScore over every device type of the node).

Apart from hami.engine.familyfit so that building a node state (hami.engine.state), which
computes it once, needs none of the fitting.
"""

from collections.abc import Mapping, Sequence

from hami.engine.families.base import Family, FitPod, NodeFacts, node_score
from hami.engine.families.registry import Families
from hami.engine.model import Card
from hami.engine.policy import NodePolicy


def unasked_scores(
    name: str,
    cards: Mapping[str, Sequence[Card]],
    annotations: Mapping[str, str],
    families: Families,
) -> Mapping[NodePolicy, float]:
    """What the families registered on a node (`cards`, by type) add to its score for a pod
    that takes none of their devices, under each node policy.

    HAMi's allocateAppContainers gives the pod an entry, empty where it takes nothing, for
    every device type on the node, and its OverrideScore calls each one's ScoreNode, which
    reads the pod only through the devices taken: so the value is the node's alone."""
    facts = NodeFacts(name, annotations=annotations)
    by_type = families.other_by_type()
    return {p: untaken_score(by_type, cards, FitPod(), facts, p, {}) for p in NodePolicy}


def untaken_score(
    by_type: Mapping[str, Family],
    cards: Mapping[str, Sequence[Card]],
    pod: FitPod,
    facts: NodeFacts,
    policy: NodePolicy,
    taken: Mapping[str, object],
) -> float:
    """The ScoreNode of each family on the node the pod takes nothing of."""
    return sum(
        node_score(by_type[kind], on, (), pod, facts, policy)
        for kind, on in cards.items()
        if kind not in taken and kind in by_type
    )
