"""Fitting a pod onto one node, every family looked up in one list, as HAMi's fitInDevices.

fit_node asks each configured family for its part: a family offering the FastPath
capability (hami.engine.families.base; NVIDIA's) fits its asks of the whole pod itself, and
the other families' asks are walked here, container by container, after them.

For each container and each family it asks, HAMi sorts the node's whole device list with
the GPU policy's comparator, keeps the devices whose type names the family, turns the node
down with NodeInsufficientDevice when they are fewer than asked, and calls the family's Fit
(which walks from the tail). The sort is stable on the cards' scores, so the family's cards
keep the order among themselves they have in the whole list; they are sorted here alone, with
the same key as NVIDIA's cards (hami.engine.fit). Before sorting for a container, HAMi's
ComputeScore adds that container's request to the score of each card whose model equals the
request's type exactly (`DCU`, not `DCU-Z100L`): a slot, its cores and its memory; cards
registered under a longer model name are scored on their usage alone (`_scored`). Init
containers each see the node as it is; app containers see what the ones before them took,
and the order the last sort left. The node's score gains each family's ScoreNode for the
devices chosen, and that of each family on the node the pod takes nothing of (as HAMi scores
every device type of the node).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from hami.engine import reasons as r
from hami.engine.families.base import Family, FitPod, NodeFacts, node_score, untaken_score
from hami.engine.families.basic import int32
from hami.engine.families.registry import Families
from hami.engine.fit import first_order, resorted
from hami.engine.inventory import merge_devices
from hami.engine.model import (
    PERCENTAGE_UNSET,
    Card,
    CardScores,
    ContainerDevices,
    FamilyRequest,
    NodeState,
    PodDevices,
    PodRequest,
    Usage,
)
from hami.engine.policy import PodOptions
from hami.engine.quota import NamespaceQuota
from hami.engine.score import Weights, card_score, make_card


@dataclass(frozen=True, slots=True)
class NodeFitted:
    """The pod on one node: per container (init first) the devices of every family, or the
    reason of the first family that could not fit; what the families' ScoreNode add to the
    node score; the card scores computed on the way (for the score log)."""

    devices: PodDevices | None
    reason: str
    score: float
    scores: tuple[CardScores, ...]


def fit_node(
    node: NodeState,
    request: PodRequest,
    opts: PodOptions,
    families: Families,
    key: int,
    quota: NamespaceQuota | None,
) -> NodeFitted:
    """Fit the pod's asks of every family onto the node: the FastPath members' first, in their
    order (a FastPath family's card scores are those of NodeState.cards), then the others'
    (fit_families, only for a pod asking them). `key` is hash((request, opts, quota))."""
    devices: PodDevices = ()
    logged: list[CardScores] = []
    for family in families.fast:
        fit = family.fit_pod(node, request, opts, key, quota)
        logged.extend(CardScores(node.name, c, node.cards, s) for c, s in fit.scores)
        if fit.devices is None:
            return NodeFitted(None, fit.reason, 0.0, tuple(logged))
        devices = merge_devices(devices, fit.devices)
    if not request.families:
        return NodeFitted(devices, "", 0.0, tuple(logged))
    other = fit_families(node, request, opts, families)
    if other.devices is None:
        return NodeFitted(None, other.reason, 0.0, tuple(logged))
    return NodeFitted(merge_devices(devices, other.devices), "", other.score, tuple(logged))


@dataclass(frozen=True, slots=True)
class FamiliesFit:
    """Per container (init first) the families' devices, or HAMi's reason; the node score's
    addition (the families' ScoreNode)."""

    devices: PodDevices | None
    reason: str = ""
    score: float = 0.0


@dataclass
class _Cards:
    """One family's cards of the node as the app containers leave them, in HAMi's order."""

    cards: list[Card]
    order: list[int]


def fit_families(
    node: NodeState, request: PodRequest, opts: PodOptions, families: Families
) -> FamiliesFit:
    """The asks of the families walked here (those without FastPath) on the node."""
    by_type = families.walked_by_type
    pod = FitPod(
        annotations=dict(opts.family_annotations),
        filters=opts.gpu_policy.card_filters,
        holders=_holders(node),
    )
    n_init = len(request.init)
    app: dict[str, _Cards] = {}
    taken: dict[str, list[ContainerDevices]] = {}
    out: list[ContainerDevices] = []
    for index, asks in enumerate(request.families):
        picked: list[ContainerDevices] = []
        for ask in asks:
            family = by_type.get(ask.type)
            if family is None:
                return FamiliesFit(None, f"Device type not found: {ask.type}")
            state = _state(node, ask.type, app) if index >= n_init else None
            cards = _typed(node, ask.type) if state is None else state.cards
            order = first_order(cards) if state is None else state.order
            order = resorted(cards, order, opts, _scores(cards, asks, opts.weights))
            got, why = _fit_one(family, cards, order, ask, pod, taken)
            if got is None:
                return FamiliesFit(None, why)
            picked.append(got)
            taken.setdefault(ask.type, []).append(got)
            if state is not None:
                state.order = order
                state.cards = _add(state.cards, got)
        out.append(tuple(d for got in picked for d in got))
    policy = opts.node_policy
    # Of the node's facts beyond its cards, the state keeps the annotations some family's score
    # reads (FamilyWire.node_reads); its labels and capacity, which only decode_node reads,
    # are not kept.
    facts = NodeFacts(node.name, annotations=node.annotations)
    score = sum(
        node_score(by_type[kind], node.families.get(kind, ()), tuple(chosen), pod, facts, policy)
        for kind, chosen in taken.items()
    )
    return FamiliesFit(
        tuple(out), "", score + untaken_score(by_type, node.families, pod, facts, policy, taken)
    )


def _holders(node: NodeState) -> Mapping[str, tuple[Mapping[str, str], ...]]:
    """The annotations of the pods holding each card (NodeState.holders without their keys),
    derived once per node state."""
    if not node.holders:
        return {}
    found = node.memo.get(_HOLDERS)
    if found is None:
        found = node.memo[_HOLDERS] = {
            card: tuple(a for _, a in pods) for card, pods in node.holders.items()
        }
    return found  # type: ignore[return-value]


_HOLDERS = "family-holders"  # NodeState.memo's key for _holders


def _typed(node: NodeState, kind: str) -> list[Card]:
    """The family's cards HAMi offers its Fit: those whose model names the request's type, in
    any case (HAMi's getNodeResources)."""
    word = kind.lower()
    return [c for c in node.families.get(kind, ()) if word in c.info.type.lower()]


def _state(node: NodeState, kind: str, app: dict[str, _Cards]) -> _Cards:
    state = app.get(kind)
    if state is None:
        cards = _typed(node, kind)
        state = app[kind] = _Cards(cards, first_order(cards))
    return state


def _scores(
    cards: Sequence[Card], asks: Sequence[FamilyRequest], weights: Weights
) -> Sequence[float] | None:
    """The cards' scores as HAMi's ComputeScore computes them for one container: each of its
    requests whose type equals a card's model exactly adds a slot, its cores and its memory (a
    share of the card's where it asks a percentage) to that card's usage, for the score only;
    None where no card's model is a requested type (the usage's scores)."""
    exact = {a.type: a for a in asks}
    if not any(c.info.type in exact for c in cards):
        return None
    out = []
    for c in cards:
        ask = exact.get(c.info.type)
        usage = c.usage
        if ask is not None:
            pct = ask.mem_percentage
            # Go's int32 of the int64 product, as ComputeScore computes it.
            mem = ask.memreq if pct in (0, PERCENTAGE_UNSET) else int32(c.info.devmem * pct // 100)
            usage = usage + Usage(1, mem, ask.coresreq)
        out.append(card_score(c.info, usage, weights))
    return out


def _fit_one(
    family: Family,
    cards: Sequence[Card],
    order: Sequence[int],
    ask: FamilyRequest,
    pod: FitPod,
    taken: Mapping[str, list[ContainerDevices]],
) -> tuple[ContainerDevices | None, str]:
    if ask.nums > len(cards):
        return None, r.NODE_INSUFFICIENT_DEVICE
    ordered = [cards[i] for i in order]
    fit = family.fit(ordered, ask, pod, tuple(taken.get(ask.type, ())))
    if fit.devices is None:
        return None, fit.reason
    return tuple(replace(d, family=ask.type) for d in fit.devices), ""


def _add(cards: list[Card], devices: ContainerDevices) -> list[Card]:
    """The cards with what one container took (HAMi's AddResourceUsage: a slot each)."""
    taken: dict[str, Usage] = {}
    for d in devices:
        taken[d.uuid] = taken.get(d.uuid, Usage()) + Usage(1, d.usedmem, d.usedcores)
    return [
        c if (u := taken.get(c.info.id)) is None else make_card(c.info, c.usage + u, c.untrusted)
        for c in cards
    ]
