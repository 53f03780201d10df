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
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

from hami.engine import reasons as r
from hami.engine.checks import core_verdict
from hami.engine.model import Card, CardScores, NodeState
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


MEMO_KEY = "capacity"  # the key of a node state's summary in its memo (NodeState.memo)


def capacity_of(node: NodeState) -> Capacity | None:
    """The node's summary, made on first use and kept with the state (NodeState.memo)."""
    if MEMO_KEY not in node.memo:
        node.memo[MEMO_KEY] = summarize(node.name, node.cards, node.cordoned)
    cap = node.memo[MEMO_KEY]
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
