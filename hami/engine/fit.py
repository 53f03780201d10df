"""Fitting one pod onto one node: card order, HAMi's checks in HAMi's order, reasons.

HAMi sorts a node's cards with the policy's comparator, in place, before each
container, and walks the list from the tail. Go's sort.Sort is an insertion
sort (stable) for 12 elements or fewer, and a single policy's comparator has no
index key, so cards that tie keep the order the previous container's sort left
them in: a card the first container took and that ties with the others after
it stays last and is taken again. That order is reproduced here: the first
container starts from the cards by device index (HAMi starts from the node
annotation's order, which its device plugin writes in Go map order, i.e. at
random; by index gives the same answer whenever the annotation lists the cards
in index order, as Lab 14 shows), each later app container from the order the
one before left. Chains end on the device index, so their order never depends
on what came before.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from hami.engine import reasons as r
from hami.engine.checks import early_verdict, slot_verdict, verdict
from hami.engine.mig import mig_request
from hami.engine.model import (
    Card,
    ContainerDevice,
    ContainerRequest,
    NodeState,
    PodDevices,
    PodRequest,
    Usage,
)
from hami.engine.policy import CardKey, GpuPolicy, PodOptions
from hami.engine.quota import NamespaceQuota
from hami.engine.score import card_scores, make_card
from hami.engine.walk import ContainerFit, QuotaGate, SortKey, by_topology, share, walk

# Each chain key's part of the ascending sort key of a card and its score.
_CHAIN_KEYS: dict[CardKey, Callable[[Card, float], float]] = {
    CardKey.BINPACK: lambda c, s: s,
    CardKey.SPREAD: lambda c, s: -s,
    CardKey.NUMA: lambda c, s: c.info.numa,
}


@lru_cache(maxsize=64)
def _sort_key(policy: GpuPolicy, numa_bind: bool) -> SortKey:
    """Ascending key of HAMi's Less for this policy (the preferred card sorts last).

    Exactly Less's keys: a stable sort on them leaves ties in the order given, as Go's
    insertion sort does. Cached: a decision fits every candidate node with the same policy.
    """
    if policy.chain:
        keys = list(policy.keys) or [CardKey.SPREAD]
        if numa_bind and CardKey.NUMA in keys:
            keys.remove(CardKey.NUMA)
        if numa_bind:
            keys.insert(0, CardKey.NUMA)
        # CardKey(k): a key outside the vocabulary is an error, never some other key.
        parts = [_CHAIN_KEYS[CardKey(k)] for k in keys]
        return lambda c, s: (*(p(c, s) for p in parts), c.info.index)
    if policy.single == "mutex":
        return lambda c, s: (-c.usage.used, c.info.numa)
    if numa_bind:
        if policy.single == "binpack":
            return lambda c, s: (-c.info.numa, s)
        return lambda c, s: (c.info.numa, -s)
    if policy.single == "binpack":
        return lambda c, s: (s, c.info.numa)
    return lambda c, s: (-s, c.info.numa)


def first_order(cards: Sequence[Card]) -> list[int]:
    """Positions of `cards` in the order the first container's sort starts from: by index."""
    return sorted(range(len(cards)), key=lambda i: cards[i].info.index)


def resorted(
    cards: Sequence[Card],
    order: Sequence[int],
    opts: PodOptions,
    scores: Sequence[float] | None = None,
) -> list[int]:
    """`order` after HAMi's in-place sort for one container: stable, on that container's scores
    (`scores`, one per card, where the caller computed them; else the cards' usage's)."""
    key = _sort_key(opts.gpu_policy, opts.numa_bind)
    if scores is None:
        scores = card_scores(cards, opts.weights)
    return sorted(order, key=lambda i: key(cards[i], scores[i]))


@dataclass(frozen=True, slots=True)
class NodeFit:
    node: str
    devices: tuple[tuple[ContainerDevice, ...], ...] | None  # per container, init first
    reason: str
    scores: tuple[tuple[int, tuple[float, ...]], ...]  # (container, per-card scores)


def fit_container(
    cards: Sequence[Card],
    req: ContainerRequest,
    opts: PodOptions,
    cordoned: frozenset[str],
    links: dict[str, dict[str, int]] | None = None,
    quota: QuotaGate | None = None,
    order: Sequence[int] | None = None,
) -> ContainerFit:
    """Pick cards for one container from `cards` (one vendor's cards of one node).

    `order` holds the positions of `cards` in the order HAMi's sort starts from
    (first_order when None). Each card's verdict depends on that card alone,
    so verdicts are taken in one pass and only the passing cards are sorted
    (stably, so they keep the order they would have in the whole sorted list);
    a node that cannot fit is rejected without sorting. numa-bind, a
    namespace quota and cards in MIG mode need HAMi's ordered walk instead
    (hami.engine.walk): a change of NUMA node starts the selection over, the
    quota counts the cards already picked, and a MIG card's placements depend
    on the instances picked before.
    """
    scores = card_scores(cards, opts.weights)
    if req.nums > len(cards) and not mig_request(cards, opts):
        return ContainerFit(None, r.NODE_INSUFFICIENT_DEVICE, scores)

    cores = min(req.coresreq, 100)
    key = _sort_key(opts.gpu_policy, opts.numa_bind)
    if quota is not None and not quota((_cheapest(cards, req, cores),)):
        return _over_quota(cards, scores, opts, cordoned)
    start = first_order(cards) if order is None else order
    if opts.numa_bind or quota is not None or any(c.info.mig for c in cards):
        return walk(cards, scores, req, cores, opts, cordoned, key, links, quota, start)
    verdicts = [verdict(c, req, cores, opts, cordoned) for c in cards]
    counts: dict[str, int] = {}
    for v in verdicts:
        if v is not None:
            counts[v] = counts.get(v, 0) + 1
    passing = [(cards[i], scores[i]) for i in start if verdicts[i] is None]
    if len(passing) >= req.nums:
        passing.sort(key=lambda cs: key(*cs))
        picked = [share(c, req, cores) for c, _ in reversed(passing)]
        if opts.gpu_policy.topology:
            return ContainerFit(by_topology(picked, req.nums, links or {}), "", scores)
        return ContainerFit(tuple(picked[: req.nums]), "", scores)
    if passing:
        counts[r.ALLOCATED_CARDS_INSUFFICIENT] = len(passing)
    return ContainerFit(None, r.card_reasons(counts, len(cards)), scores)


def _cheapest(cards: Sequence[Card], req: ContainerRequest, cores: int) -> ContainerDevice:
    """The smallest share the container could take of any one of these cards."""
    return ContainerDevice("", min(req.memory_on(c.info.share_base) for c in cards), cores)


def _over_quota(
    cards: Sequence[Card], scores: tuple[float, ...], opts: PodOptions, cordoned: frozenset[str]
) -> ContainerFit:
    """The walk's answer when even the smallest share is over the quota: no card is ever
    picked, so each card's reason is its own, in any order, and the quota where it passes
    the checks before it. Spares a pending pod the walk on every node."""
    counts: dict[str, int] = {}
    for card in cards:
        why = early_verdict(card, opts, cordoned) or slot_verdict(card, opts)
        why = why or r.RESOURCE_QUOTA_NOT_FIT
        counts[why] = counts.get(why, 0) + 1
    return ContainerFit(None, r.card_reasons(counts, len(cards)), scores)


def _add(cards: list[Card], devices: tuple[ContainerDevice, ...]) -> list[Card]:
    """The cards with what one container took (on a MIG card possibly several instances)."""
    taken: dict[str, Usage] = {}
    for d in devices:
        mig = () if d.mig is None else (d.mig,)
        taken[d.uuid] = taken.get(d.uuid, Usage()) + Usage(1, d.usedmem, d.usedcores, mig)
    out = []
    for c in cards:
        u = taken.get(c.info.id)
        out.append(c if u is None else make_card(c.info, c.usage + u, c.untrusted))
    return out


MEMO_SIZE = 32


def fit_pod(
    node: NodeState,
    request: PodRequest,
    opts: PodOptions,
    key: int | None = None,
    quota: NamespaceQuota | None = None,
) -> NodeFit:
    """fit_pod_uncached, remembered on the node state for the pod's (request, options, quota).

    `key` is hash((request, opts, quota)), computed once per decision by a caller that fits
    many nodes, instead of once per node.
    """
    key = hash((request, opts, quota)) if key is None else key
    hit = node.memo.get(key)
    if isinstance(hit, tuple) and hit[0] == (request, opts, quota):
        fit: NodeFit = hit[1]
        return fit
    fit = fit_pod_uncached(node, request, opts, quota)
    if len(node.memo) >= MEMO_SIZE:
        node.memo.clear()
    node.memo[key] = ((request, opts, quota), fit)
    return fit


def fit_pod_uncached(
    node: NodeState, request: PodRequest, opts: PodOptions, quota: NamespaceQuota | None = None
) -> NodeFit:
    """Fit every container of the pod onto the node, or say why not.

    Init containers run before the app containers and one at a time, so each
    is fitted against the node as it is; app containers run together, so each
    one sees the cards the previous ones took. With a namespace quota, every
    card is checked against it with the cards of the containers before it.
    """
    cards = list(node.cards)
    links = {k: dict(v) for k, v in node.links.items()} if opts.gpu_policy.topology else None
    scores: list[tuple[int, tuple[float, ...]]] = []
    out: list[tuple[ContainerDevice, ...]] = []
    n_init = len(request.init)
    # The app containers share one card list that each one's sort leaves in place for the
    # next; every init container sorts a copy of the node's list (HAMi's DeepCopy per init).
    order = first_order(cards)
    containers = (*request.init, *request.app)
    last_app = max((i for i, q in enumerate(containers) if q is not None), default=-1)
    for index, req in enumerate(containers):
        if req is None:
            out.append(())
            continue
        gate = None if quota is None else _quota_gate(quota, tuple(out), n_init)
        # Init containers come first and take nothing from each other: each sees the node as
        # it is. App containers run together: each sees what the ones before it took.
        app = index >= n_init
        fit = fit_container(cards, req, opts, node.cordoned, links, gate, order if app else None)
        scores.append((index, fit.scores))
        if fit.devices is None:
            return NodeFit(node.name, None, fit.reason, tuple(scores))
        out.append(fit.devices)
        if app and index < last_app:
            order = resorted(cards, order, opts)
            cards = _add(cards, fit.devices)
    return NodeFit(node.name, tuple(out), "", tuple(scores))


def _quota_gate(quota: "NamespaceQuota", before: PodDevices, n_init: int) -> QuotaGate:
    return quota.gate(before, n_init)
