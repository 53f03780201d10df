"""Building node states and turning allocations into card usage."""

from collections.abc import Iterable, Mapping, Sequence

from hami.engine.families.base import FitPod, NodeFacts, untaken_score
from hami.engine.families.registry import Families
from hami.engine.inventory import PodAllocation
from hami.engine.mig import stray_instances, untrusted
from hami.engine.migalloc import by_card
from hami.engine.model import (
    Card,
    DeviceInfo,
    NodeState,
    Usage,
    is_nvidia,
)
from hami.engine.policy import NodePolicy
from hami.engine.score import make_card, node_score
from hami.engine.usage import pod_usage


def build_node(
    name: str,
    devices: Iterable[DeviceInfo],
    usage: Mapping[str, Usage] | None = None,
    cordoned: frozenset[str] = frozenset(),
    links: Mapping[str, Mapping[str, int]] | None = None,
    previous: NodeState | None = None,
    families: Iterable[tuple[str, Iterable[DeviceInfo]]] = (),
    holders: Mapping[str, tuple[tuple[str, Mapping[str, str]], ...]] | None = None,
    annotations: Mapping[str, str] | None = None,
    *,
    registry: Families,
) -> NodeState:
    """The node's state; cards unchanged since `previous` (its last state) are reused as they
    are, so a pod arriving costs one card's score, not every card's. `families` are the other
    device families' cards by type (NodeInventory.families); `usage` holds theirs too;
    `holders` the pods holding their cards, where a family reads them (NodeState.holders);
    `annotations` the node's that their node scores read (NodeState.annotations); `registry`
    the families by which the node is ranked (NodeState.binpack_rank)."""
    usage = usage or {}
    before = {c.info.id: c for c in previous.cards} if previous is not None else {}
    # Other vendors' devices never take an NVIDIA request (HAMi matches the word in the type).
    nvidia = [d for d in devices if is_nvidia(d)]
    stray = stray_instances(usage, (d.id for d in nvidia))
    cards = tuple(
        _card(before.get(d.id), d, u, untrusted(d.mig, u, stray))
        for d in nvidia
        for u in (usage.get(d.id, Usage()),)
    )
    if not families:
        score = node_score(cards)
        return NodeState(name, cards, score, score, score, cordoned, links or {})
    if previous is not None:
        before = {c.info.id: c for fc in previous.families.values() for c in fc}
    others = {
        kind: tuple(_card(before.get(d.id), d, usage.get(d.id, Usage()), False) for d in infos)
        for kind, infos in families
    }
    # HAMi's node score sums every device of the node, whichever family.
    score = node_score((*cards, *(c for fc in others.values() for c in fc)))
    unasked = unasked_scores(name, others, annotations or {}, registry)
    return NodeState(
        name,
        cards,
        score,
        score + unasked[NodePolicy.BINPACK],
        score + unasked[NodePolicy.SPREAD],
        cordoned,
        links or {},
        others,
        holders or {},
        annotations or {},
    )


def unasked_scores(
    name: str,
    cards: Mapping[str, Sequence[Card]],
    annotations: Mapping[str, str],
    families: Families,
) -> Mapping[NodePolicy, float]:
    """What the families registered on a node (`cards`, by type: NVIDIA's cards are the
    state's own, so its ScoreNode, which adds 0, is not asked here) add to its score for a
    pod that takes none of their devices, under each node policy."""
    facts = NodeFacts(name, annotations=annotations)
    by_type = families.by_type()
    return {p: untaken_score(by_type, cards, FitPod(), facts, p, {}) for p in NodePolicy}


def _card(before: Card | None, info: DeviceInfo, usage: Usage, distrusted: bool) -> Card:
    if (
        before is not None
        and before.untrusted == distrusted
        and before.usage == usage
        and before.info == info
    ):
        return before
    return make_card(info, usage, distrusted)


def mig_cards(node: NodeState | None) -> frozenset[str]:
    return frozenset() if node is None else frozenset(c.info.id for c in node.cards if c.info.mig)


def mig_devices(devices: Iterable[DeviceInfo]) -> frozenset[str]:
    """mig_cards of the state `devices` build: what counting a pod needs of its node, without
    building the node."""
    return frozenset(d.id for d in devices if d.mig and is_nvidia(d))


def held(alloc: PodAllocation, mig: frozenset[str]) -> dict[str, Usage]:
    """What a pod's allocation annotations take from each card of its node; `mig` are the
    node's cards in MIG mode. The other families' cards are counted as NVIDIA's without MIG."""
    usage = pod_usage(alloc.devices, alloc.n_init, alloc.init_done, by_card(alloc.mig), mig)
    if alloc.family_devices:
        usage.update(pod_usage(alloc.family_devices, alloc.n_init, alloc.init_done, {}))
    return usage
