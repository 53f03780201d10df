"""What a node has left, summed up once per state, so a decision can turn a node down unseen.

kube-scheduler wants a reason for every node that cannot take the pod, and HAMi's reason
counts the cards by the first check each one fails. When most nodes are full, walking their
cards for every new pod shape is where a decision's time goes. So each state carries the
counts its cards give before any request is known, and what is needed to count the rest:

* health, cordon and time slices do not depend on the request: counted once;
* mutex only asks whether a card is in use: the open cards are kept twice, all of them and
  the idle ones;
* memory is a threshold: the open cards are sorted by free memory, and the number that fail
  is a bisection;
* the core checks that follow depend on the request only through its cores. For the two
  common asks, no cores and the whole card, every card's verdict is fixed, so it is counted
  per tail of the sorted cards; for any other ask the tail's most free cores shows when none
  is enough.

A node that might fit is fitted card by card as before. The state is replaced whenever its
usage changes, so a summary is never stale.

Nodes built alike and used alike have equal summaries, and a large cluster is mostly such
classes (full nodes, idle nodes of one model). Each summary carries a signature of its cards'
states, so one decision answers each class once and every other node of it with a lookup. A
pod that no card anywhere has the memory for is answered without even that: each state's
reason for it is made with the state.
"""

from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter

from hami.engine import reasons as r
from hami.engine.checks import core_verdict, type_ok
from hami.engine.model import PERCENTAGE_UNSET, Card, CardScores, NodeState, PodRequest
from hami.engine.policy import CardFilter, PodOptions
from hami.engine.score import DEFAULT_WEIGHTS, card_scores

ALL_CORES = 100
_NO_CARDS = 1 << 62

# Cards failing CardInsufficientCore, ExclusiveDeviceAllocateConflict and
# CardComputeUnitsExhausted, and cards passing: what the core checks make of some cards.
CoreCounts = tuple[int, int, int, int]


def _tally(cards: Sequence[Card], cores: int) -> tuple[CoreCounts, ...]:
    """Core-check counts of cards[k:] for every k, under a request of `cores`."""
    out = [(0, 0, 0, 0)]
    core = excl = exhausted = passing = 0
    for c in reversed(cards):
        v = core_verdict(c.info, c.usage, cores)
        core += v == r.CARD_INSUFFICIENT_CORE
        excl += v == r.EXCLUSIVE_CONFLICT
        exhausted += v == r.CARD_COMPUTE_UNITS_EXHAUSTED
        passing += v is None
        out.append((core, excl, exhausted, passing))
    return tuple(reversed(out))


@dataclass(frozen=True, slots=True)
class Pool:
    """Cards that pass every check before the memory check, by free memory, least first."""

    free_mem: tuple[int, ...]
    free_cores: tuple[int, ...]
    most_cores: tuple[int, ...]  # most free cores among cards[k:]; -1 past the end
    # Counts of cards[k:] for a request of no cores, and of the whole card.
    tallies: tuple[tuple[CoreCounts, ...], tuple[CoreCounts, ...]]
    devmem: int | None  # the cards' common size; None if sizes differ (percentages need it)

    def between(self, k: int, cores: int) -> CoreCounts:
        """Counts of cards[k:] for a request of some cores but not all: only the core check fails."""
        ok = len(self.free_mem) - k
        if self.most_cores[k] < cores:
            return (ok, 0, 0, 0)
        passing = sum(f >= cores for f in self.free_cores[k:])
        return (ok - passing, 0, 0, passing)


def _pool(cards: list[Card]) -> Pool:
    cards = sorted(cards, key=lambda c: c.info.devmem - c.usage.usedmem)
    free_cores = tuple(c.info.devcore - c.usage.usedcores for c in cards)
    most = [-1]
    for f in reversed(free_cores):
        most.append(max(most[-1], f))
    sizes = {c.info.devmem for c in cards}
    return Pool(
        free_mem=tuple(c.info.devmem - c.usage.usedmem for c in cards),
        free_cores=free_cores,
        most_cores=tuple(reversed(most)),
        tallies=(_tally(cards, 0), _tally(cards, ALL_CORES)),
        # Without cards any size will do: nothing is measured against it.
        devmem=sizes.pop() if len(sizes) == 1 else (0 if not sizes else None),
    )


@dataclass(frozen=True, slots=True)
class Capacity:
    """A node's cards as the checks see them before any request."""

    cards: int
    not_healthy: int
    cordoned: int
    exhausted: int  # time slices all taken
    open: Pool  # the rest
    idle: Pool  # the open cards nobody uses (mutex takes only these)
    # A card of the node when all have the same model and mode, which is all that type and
    # mode selectors look at; None when they differ.
    kind: Card | None
    scored: CardScores  # what a decision logs when the pod's first container asks for a GPU
    # The cards' states as one string (hashed once, compared by identity or memcmp): equal
    # for two nodes exactly when every check above counts the same for any request.
    signature: str
    # The most free memory of an open card; -1 without any, and above any ask (_NO_CARDS)
    # without cards, so that one pass tells whether a one-card pod fits nowhere by memory.
    most_free: int
    # (reason, cards passing) by what decides them: pods of every shape that leave the same
    # cards short of memory, with the same cores, get the same counts, so each text is made
    # once a state.
    seen: dict[int, tuple[str, int]] = field(default_factory=dict, compare=False, repr=False)
    # HAMi's reason for a pod that no open card has the memory for, whatever its cores (they
    # then count no card), without mutex and with it: made with the state, so that a decision
    # reads it for thousands of nodes in C.
    short: str = field(init=False, compare=False, repr=False)
    short_idle: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "short", self.counted(len(self.open.free_mem), 0, False)[0])
        object.__setattr__(self, "short_idle", self.counted(len(self.idle.free_mem), 0, True)[0])

    def counted(self, short: int, cores: int, mutex: bool) -> tuple[str, int]:
        """HAMi's reason when `short` cards of the pool the pod draws on lack its memory,
        and how many cards pass every check."""
        pool, busy = self.open, 0
        if mutex:
            pool, busy = self.idle, len(self.open.free_mem) - len(self.idle.free_mem)
        if cores == 0 or cores == ALL_CORES:
            core, excl, compute, passing = pool.tallies[cores == ALL_CORES][short]
        else:
            core, excl, compute, passing = pool.between(short, cores)
        text = _reasons(
            self.cards,
            {
                r.CARD_NOT_HEALTH: self.not_healthy,
                r.CARD_CORDONED: self.cordoned,
                r.CARD_TIME_SLICING_EXHAUSTED: self.exhausted,
                r.EXCLUSIVE_CONFLICT: busy + excl,
                r.CARD_INSUFFICIENT_MEMORY: short,
                r.CARD_INSUFFICIENT_CORE: core,
                r.CARD_COMPUTE_UNITS_EXHAUSTED: compute,
                r.ALLOCATED_CARDS_INSUFFICIENT: passing,
            },
        )
        return text, passing

    def mismatch(self) -> str:
        """HAMi's reason when no card is of the model or mode the pod selects."""
        return _reasons(
            self.cards,
            {
                r.CARD_NOT_HEALTH: self.not_healthy,
                r.CARD_CORDONED: self.cordoned,
                r.CARD_TYPE_MISMATCH: self.cards - self.not_healthy - self.cordoned,
            },
        )


def _reasons(cards: int, counts: dict[str, int]) -> str:
    return r.card_reasons({k: n for k, n in counts.items() if n}, cards)


_SUMMARY = "capacity"  # the key of a node state's summary in its memo


def capacity_of(node: NodeState) -> Capacity | None:
    """The node's summary, made on first use and kept with the state (NodeState.memo)."""
    if _SUMMARY not in node.memo:
        node.memo[_SUMMARY] = summarize(node.name, node.cards, node.cordoned)
    cap = node.memo[_SUMMARY]
    assert cap is None or isinstance(cap, Capacity)
    return cap


def summarize(name: str, cards: tuple[Card, ...], cordoned: frozenset[str]) -> Capacity | None:
    """None for a node with a card in MIG mode: whether it fits depends on the card's
    placements, which counts do not keep, so such a node is always fitted card by card."""
    if any(c.info.mig for c in cards):
        return None
    not_healthy = cordoned_n = exhausted = 0
    open_cards: list[Card] = []
    for c in cards:
        if not c.healthy:
            not_healthy += 1
        elif c.info.id in cordoned:
            cordoned_n += 1
        elif c.info.count <= c.usage.used:
            exhausted += 1
        else:
            open_cards.append(c)
    kinds = {(c.info.type, c.info.mode) for c in cards}
    states = sorted(
        (
            c.info.type,
            c.info.mode,
            c.healthy,
            c.info.id in cordoned,
            c.info.count,
            c.info.devmem,
            c.info.devcore,
            c.usage.used,
            c.usage.usedmem,
            c.usage.usedcores,
        )
        for c in cards
    )
    idle_cards = [c for c in open_cards if c.usage.used <= 0]
    pool = _pool(open_cards)
    return Capacity(
        cards=len(cards),
        not_healthy=not_healthy,
        cordoned=cordoned_n,
        exhausted=exhausted,
        open=pool,
        idle=pool if len(idle_cards) == len(open_cards) else _pool(idle_cards),
        kind=cards[0] if len(kinds) == 1 else None,
        scored=CardScores(name, 0, cards, card_scores(cards, DEFAULT_WEIGHTS)),
        signature=repr(states),
        most_free=pool.free_mem[-1] if open_cards else (-1 if cards else _NO_CARDS),
    )


# Asked of a node with the decision's score log: a reason when the node cannot take the pod,
# after logging the card scores fitting it would have logged; None when it might take it.
Check = Callable[[NodeState, list[CardScores]], str | None]
# Asked of every candidate at once: each one's reason and score log, in the candidates' order,
# or None as soon as one might take the pod (the decision then tries them in its order).
Nowhere = Callable[[Sequence[NodeState]], tuple[list[str], list[CardScores]] | None]


@dataclass(frozen=True, slots=True)
class Summaries:
    """The two ways a decision asks the nodes' summaries about one pod."""

    check: Check
    nowhere: Nowhere


# Keys of Capacity.seen: cards short of memory, then cores and mutex, as one number; and the
# one for a pod that selects another model or mode.
_KEYS = (ALL_CORES + 1) * 2
_MISMATCH = -1
# A state that outlives pods of many core counts would otherwise keep a text for each.
SEEN_SIZE = 32
_UNSEEN = "\0unseen"  # not a reason any check gives
# Candidates asked one by one before all of them at once (see nowhere()).
_PROBE = 32
_SIGNATURE = attrgetter("signature")
_SCORED = attrgetter("scored")
_MEMO = attrgetter("memo")
_CARDS = attrgetter("cards")
_MOST_FREE = attrgetter("most_free")
_SHORT = (attrgetter("short"), attrgetter("short_idle"))
# Nodes a decision looks at before it judges whether they repeat enough to group.
_SAMPLE = 256


def _remember(cap: Capacity, key: int, seen: tuple[str, int]) -> None:
    if len(cap.seen) >= SEEN_SIZE:
        cap.seen.clear()
    cap.seen[key] = seen


# The card filters the summaries answer for (mutex: the idle pool).
SUMMARISED_FILTERS = frozenset({CardFilter.MUTEX})


def summary_check(request: PodRequest, opts: PodOptions) -> Summaries | None:
    """The question a decision asks every node's summary about this pod, or None if a summary
    cannot answer it: the pod asks for no GPU, or selects cards by UUID, which a summary does
    not keep.

    Only the first container that asks for a GPU is looked at: it sees the node as it is, and
    when it cannot fit, HAMi's reason is its reason. The check runs once per node, and a
    decision over 1,000 full nodes is mostly this: it is a closure so that its settings are
    read as local cells, not attributes, and it allocates nothing on the common path (the
    cards' scores are built with the state): a tuple per node made the garbage collector run
    within decisions, which showed in the p99.
    """
    containers = enumerate((*request.init, *request.app))
    first = next(((i, c) for i, c in containers if c is not None), None)
    if first is None or opts.use_uuids or opts.nouse_uuids:
        return None
    if opts.gpu_policy.card_filters - SUMMARISED_FILTERS:
        return None  # a card filter the pools below do not keep apart: fitted card by card
    index, req = first
    if req.coresreq < 0:
        return None  # refused at admission; the counts' keys assume cores from 0 to 100
    nums, pct = req.nums, req.mem_percentage
    share = req.memreq == 0 and pct != PERCENTAGE_UNSET  # a share of each card's memory
    need = req.memory_on(0)
    cores = min(req.coresreq, ALL_CORES)
    mutex, numa_bind, by_type = opts.gpu_policy.mutex, opts.numa_bind, opts.selects_cards
    weights = None if opts.weights == DEFAULT_WEIGHTS else opts.weights
    key = cores * 2 + mutex
    # Each class of equal summaries answered once for this decision: reason, or None. Where
    # nodes are mostly unalike (each filled its own way) the lookups cost more than they
    # save, so after a sample of nodes with few repeats the decision answers each directly.
    answered: dict[str, str | None] = {}
    asked = [0]  # nodes looked up while grouping; -1 once grouping is given up

    def check(node: NodeState, log: list[CardScores]) -> str | None:
        # The memo read inline: this runs once per node, and a call is a third of it.
        cap = node.memo.get(_SUMMARY, _UNSEEN)
        if cap is _UNSEEN:
            cap = capacity_of(node)
        if not isinstance(cap, Capacity):
            return None
        if asked[0] < 0:
            text = answer(cap)
        else:
            text = answered.get(cap.signature, _UNSEEN)
            if text is _UNSEEN:
                text = answer(cap)
                answered[cap.signature] = text
            asked[0] += 1
            if asked[0] == _SAMPLE and len(answered) * 2 > _SAMPLE:
                asked[0] = -1
        if text is None:
            return None
        if index or weights is not None:
            logged = cap.scored.scores if weights is None else card_scores(node.cards, weights)
            log.append(CardScores(node.name, index, node.cards, logged))
        else:
            log.append(cap.scored)
        return text

    def nowhere(nodes: Sequence[NodeState]) -> tuple[list[str], list[CardScores]] | None:
        # Each class of equal summaries answered once, every node then mapped to its class's
        # answer in C (map, zip): at 5,000 nodes, looping over them in Python was most of the
        # decision for a pod that fits nowhere, and the nodes need no preference order.
        if index or weights is not None:
            return None  # their score logs are built per node
        # A pod that fits somewhere mostly fits one of the first few candidates: asked one
        # by one, they spare such a pod the whole batch (a millisecond at 5,000 nodes).
        for node in nodes[:_PROBE]:
            cap = capacity_of(node)
            if cap is None or verdict(cap) is None:
                return None
        caps = list(map(dict.get, map(_MEMO, nodes), repeat(_SUMMARY)))
        # By type, in C: `x in caps` would call the dataclass's __eq__ on every summary.
        if set(map(type, caps)) != {Capacity}:
            caps = [capacity_of(n) for n in nodes]
            if None in caps:
                return None  # a node of MIG cards is fitted card by card
        summaries: list[Capacity] = caps  # type: ignore[assignment]
        # No open card of any node has the memory asked, nor any node too few cards: each
        # node's answer is its state's text for that (mutex's idle cards are open cards too;
        # a share asks `need` 0 here), read in C, not a Python call per state (2,600 among
        # 5,000 nodes of 30 pods each: most of such a decision's time before).
        if (
            not by_type
            and (nums == 1 or 1 <= nums <= min(map(_CARDS, summaries), default=0))
            and need > max(map(_MOST_FREE, summaries), default=-1)
        ):
            return list(map(_SHORT[mutex], summaries)), list(map(_SCORED, summaries))
        signatures = list(map(_SIGNATURE, summaries))
        for cap in dict(zip(signatures, summaries, strict=True)).values():
            if verdict(cap) is None:
                return None
        texts: list[str] = list(map(answered.__getitem__, signatures))  # type: ignore[arg-type]
        return texts, list(map(_SCORED, summaries))

    def verdict(cap: Capacity) -> str | None:
        """answer(), once per class of equal summaries in this decision."""
        text = answered.get(cap.signature, _UNSEEN)
        if text is _UNSEEN:
            text = answered[cap.signature] = answer(cap)
        return text

    def answer(cap: Capacity) -> str | None:
        if nums > cap.cards:
            text = r.NODE_INSUFFICIENT_DEVICE
        elif by_type and (cap.kind is None or not type_ok(cap.kind, opts)):
            if cap.kind is None:
                return None
            seen = cap.seen.get(_MISMATCH)
            if seen is None:
                seen = (cap.mismatch(), 0)
                _remember(cap, _MISMATCH, seen)
            text = seen[0]
        else:
            pool = cap.idle if mutex else cap.open
            at_least = need
            if share:
                if pool.devmem is None:
                    return None  # a share of cards of different sizes
                at_least = pool.devmem * pct // 100
            short = bisect_left(pool.free_mem, at_least)
            counted = short * _KEYS + key
            seen = cap.seen.get(counted)
            if seen is None:
                seen = cap.counted(short, cores, mutex)
                _remember(cap, counted, seen)
            text, passing = seen
            # Enough cards pass; with numa-bind, the ones that do are counted by NUMA node.
            if passing >= nums or (passing and numa_bind):
                return None
        return text

    return Summaries(check, nowhere)
