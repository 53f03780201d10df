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
from itertools import combinations
from typing import TYPE_CHECKING

from hami.engine import reasons as r
from hami.engine.model import (
    Card,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    NodeState,
    PodDevices,
    PodRequest,
    Usage,
)
from hami.engine.policy import GpuPolicy, PodOptions
from hami.engine.score import DEFAULT_WEIGHTS, Weights, card_score, make_card

if TYPE_CHECKING:  # quota -> state -> capacity imports this module
    from hami.engine.quota import NamespaceQuota

SortKey = Callable[[Card, float], tuple[float, ...]]


@lru_cache(maxsize=64)
def _sort_key(policy: GpuPolicy, numa_bind: bool) -> SortKey:
    """Ascending key of HAMi's Less for this policy (the preferred card sorts last).

    Exactly Less's keys: a stable sort on them leaves ties in the order given, as Go's
    insertion sort does. Cached: a decision fits every candidate node with the same policy.
    """
    if policy.chain:
        keys = list(policy.keys) or ["spread"]
        if numa_bind and "numa" in keys:
            keys.remove("numa")
        if numa_bind:
            keys.insert(0, "numa")
        parts: list[Callable[[Card, float], float]] = []
        for k in keys:
            if k == "binpack":
                parts.append(lambda c, s: s)
            elif k == "spread":
                parts.append(lambda c, s: -s)
            else:
                parts.append(lambda c, s: c.info.numa)
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


def resorted(cards: Sequence[Card], order: Sequence[int], opts: PodOptions) -> list[int]:
    """`order` after HAMi's in-place sort for one container: stable, on that container's scores."""
    key = _sort_key(opts.gpu_policy, opts.numa_bind)
    scores = card_scores(cards, opts.weights)
    return sorted(order, key=lambda i: key(cards[i], scores[i]))


@dataclass(frozen=True, slots=True)
class ContainerFit:
    devices: tuple[ContainerDevice, ...] | None  # None: does not fit
    reason: str  # empty when it fits
    scores: tuple[float, ...]  # per card, in registration order


@dataclass(frozen=True, slots=True)
class NodeFit:
    node: str
    devices: tuple[tuple[ContainerDevice, ...], ...] | None  # per container, init first
    reason: str
    scores: tuple[tuple[int, tuple[float, ...]], ...]  # (container, per-card scores)


def type_ok(card: Card, opts: PodOptions) -> bool:
    t = card.info.type.lower()
    if opts.use_types and not any(u in t for u in opts.use_types):
        return False
    if any(n in t for n in opts.nouse_types):
        return False
    return not opts.vgpu_mode or card.info.mode in opts.vgpu_mode


def _uuid_ok(card: Card, opts: PodOptions) -> bool:
    uuid = card.info.id
    if opts.use_uuids and uuid not in opts.use_uuids:
        return False
    return uuid not in opts.nouse_uuids


def _early_verdict(card: Card, opts: PodOptions, cordoned: frozenset[str]) -> str | None:
    """HAMi's checks before it looks at the card's NUMA node."""
    if not card.info.health:
        return r.CARD_NOT_HEALTH
    if card.info.id in cordoned:
        return r.CARD_CORDONED
    if opts.selects_cards and not type_ok(card, opts):
        return r.CARD_TYPE_MISMATCH
    return None


def _slot_verdict(card: Card, opts: PodOptions) -> str | None:
    """HAMi's checks after the NUMA node and before the quota."""
    if opts.selects_cards and not _uuid_ok(card, opts):
        return r.CARD_UUID_MISMATCH
    if card.info.count <= card.usage.used:
        return r.CARD_TIME_SLICING_EXHAUSTED
    if opts.gpu_policy.mutex and card.usage.used > 0:
        return r.EXCLUSIVE_CONFLICT
    return None


def _room_verdict(card: Card, req: ContainerRequest, cores: int) -> str | None:
    """HAMi's checks after the quota: is there room on the card."""
    info, u = card.info, card.usage
    if info.devmem - u.usedmem < req.memory_on(info.devmem):
        return r.CARD_INSUFFICIENT_MEMORY
    return core_verdict(info, u, cores)


def _verdict(
    card: Card, req: ContainerRequest, cores: int, opts: PodOptions, cordoned: frozenset[str]
) -> str | None:
    """Why this card cannot take the container, in HAMi's check order; None if it can."""
    return (
        _early_verdict(card, opts, cordoned)
        or _slot_verdict(card, opts)
        or _room_verdict(card, req, cores)
    )


def core_verdict(info: DeviceInfo, u: Usage, cores: int) -> str | None:
    """HAMi's checks after the memory check, in its order; None if the card passes them."""
    if info.devcore - u.usedcores < cores:
        return r.CARD_INSUFFICIENT_CORE
    if info.devcore == 100 and cores == 100 and u.used > 0:
        return r.EXCLUSIVE_CONFLICT
    if info.devcore != 0 and u.usedcores == info.devcore and cores == 0:
        return r.CARD_COMPUTE_UNITS_EXHAUSTED
    return None


def card_scores(cards: Sequence[Card], weights: Weights) -> tuple[float, ...]:
    """Every card's score, as logged for each container fitted."""
    if weights == DEFAULT_WEIGHTS:
        return tuple(c.score for c in cards)
    return tuple(card_score(c.info, c.usage, weights) for c in cards)


# Whether a container's cards, as picked so far, keep the pod within its namespace's quota.
QuotaGate = Callable[[tuple[ContainerDevice, ...]], bool]


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
    a node that cannot fit is rejected without sorting. numa-bind and a
    namespace quota need HAMi's ordered walk instead: a change of NUMA node
    starts the selection over, and the quota counts the cards already picked.
    """
    scores = card_scores(cards, opts.weights)
    if req.nums > len(cards):
        return ContainerFit(None, r.NODE_INSUFFICIENT_DEVICE, scores)

    cores = min(req.coresreq, 100)
    key = _sort_key(opts.gpu_policy, opts.numa_bind)
    if quota is not None and not quota((_cheapest(cards, req, cores),)):
        return _over_quota(cards, scores, opts, cordoned)
    walk = first_order(cards) if order is None else order
    if opts.numa_bind or quota is not None:
        return _walk(cards, scores, req, cores, opts, cordoned, key, links, quota, walk)
    verdicts = [_verdict(c, req, cores, opts, cordoned) for c in cards]
    counts: dict[str, int] = {}
    for v in verdicts:
        if v is not None:
            counts[v] = counts.get(v, 0) + 1
    passing = [(cards[i], scores[i]) for i in walk if verdicts[i] is None]
    if len(passing) >= req.nums:
        passing.sort(key=lambda cs: key(*cs))
        picked = [_device(c, req, cores) for c, _ in reversed(passing)]
        if opts.gpu_policy.topology:
            return ContainerFit(_by_topology(picked, req.nums, links or {}), "", scores)
        return ContainerFit(tuple(picked[: req.nums]), "", scores)
    if passing:
        counts[r.ALLOCATED_CARDS_INSUFFICIENT] = len(passing)
    return ContainerFit(None, r.card_reasons(counts, len(cards)), scores)


def _device(card: Card, req: ContainerRequest, cores: int) -> ContainerDevice:
    return ContainerDevice(card.info.id, req.memory_on(card.info.devmem), cores)


def _cheapest(cards: Sequence[Card], req: ContainerRequest, cores: int) -> ContainerDevice:
    """The smallest share the container could take of any one of these cards."""
    return ContainerDevice("", min(req.memory_on(c.info.devmem) for c in cards), cores)


def _over_quota(
    cards: Sequence[Card], scores: tuple[float, ...], opts: PodOptions, cordoned: frozenset[str]
) -> ContainerFit:
    """The walk's answer when even the smallest share is over the quota: no card is ever
    picked, so each card's reason is its own, in any order, and the quota where it passes
    the checks before it. Spares a pending pod the walk on every node."""
    counts: dict[str, int] = {}
    for card in cards:
        why = _early_verdict(card, opts, cordoned) or _slot_verdict(card, opts)
        why = why or r.RESOURCE_QUOTA_NOT_FIT
        counts[why] = counts.get(why, 0) + 1
    return ContainerFit(None, r.card_reasons(counts, len(cards)), scores)


def _walk(
    cards: Sequence[Card],
    scores: tuple[float, ...],
    req: ContainerRequest,
    cores: int,
    opts: PodOptions,
    cordoned: frozenset[str],
    key: SortKey,
    links: dict[str, dict[str, int]] | None,
    quota: QuotaGate | None,
    walk: Sequence[int] | None = None,
) -> ContainerFit:
    """HAMi's walk over the cards in preference order, its checks in its order per card."""
    start = first_order(cards) if walk is None else walk
    ordered = sorted(((cards[i], scores[i]) for i in start), key=lambda cs: key(*cs))[::-1]
    # HAMi's topology-aware choice collects every passing card; numa-bind takes the first ones.
    collect_all = opts.gpu_policy.topology and not opts.numa_bind
    counts: dict[str, int] = {}
    picked: list[ContainerDevice] = []
    prev_numa: int | None = None
    for card, _ in ordered:
        why = _early_verdict(card, opts, cordoned)
        if why is None and opts.numa_bind and prev_numa != card.info.numa:
            if picked:
                counts[r.NUMA_NOT_FIT] = counts.get(r.NUMA_NOT_FIT, 0) + len(picked)
            picked, prev_numa = [], card.info.numa
        why = why or _slot_verdict(card, opts)
        device = _device(card, req, cores)
        if why is None and quota is not None and not quota((*picked, device)):
            why = r.RESOURCE_QUOTA_NOT_FIT
        why = why or _room_verdict(card, req, cores)
        if why is not None:
            counts[why] = counts.get(why, 0) + 1
            continue
        picked.append(device)
        if len(picked) == req.nums and not collect_all:
            return ContainerFit(tuple(picked), "", scores)
    if collect_all and len(picked) >= req.nums:
        return ContainerFit(_by_topology(picked, req.nums, links or {}), "", scores)
    if picked:
        counts[r.ALLOCATED_CARDS_INSUFFICIENT] = len(picked)
    return ContainerFit(None, r.card_reasons(counts, len(cards)), scores)


def _by_topology(
    candidates: list[ContainerDevice], nums: int, links: dict[str, dict[str, int]]
) -> tuple[ContainerDevice, ...]:
    """HAMi's topology-aware choice among the cards that passed every check.

    One card: the one worst connected to the others, keeping well-linked sets
    free for multi-card pods. Several: the best-linked combination. The first
    extreme in preference order wins ties.
    """
    if len(candidates) == nums:
        return tuple(candidates)

    def link(a: str, b: str) -> int:
        return links.get(a, {}).get(b, 0)

    if nums == 1:

        def connectivity(d: ContainerDevice) -> int:
            return sum(link(d.uuid, o.uuid) for o in candidates if o.uuid != d.uuid)

        return (min(candidates, key=connectivity),)
    best = max(
        combinations(candidates, nums),
        key=lambda combo: sum(link(a.uuid, b.uuid) for a, b in combinations(combo, 2)),
    )
    return tuple(best)


def _add(cards: list[Card], devices: tuple[ContainerDevice, ...]) -> list[Card]:
    taken = {d.uuid: d for d in devices}
    out = []
    for c in cards:
        d = taken.get(c.info.id)
        out.append(
            c if d is None else make_card(c.info, c.usage + Usage(1, d.usedmem, d.usedcores))
        )
    return out


MEMO_SIZE = 32


def fit_pod(
    node: NodeState,
    request: PodRequest,
    opts: PodOptions,
    key: int | None = None,
    quota: "NamespaceQuota | None" = None,
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
    node: NodeState, request: PodRequest, opts: PodOptions, quota: "NamespaceQuota | None" = None
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
