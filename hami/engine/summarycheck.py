"""The question one decision asks every node's summary (hami.engine.capacity) about one pod.

Nodes built alike and used alike have equal summaries, and a large cluster is mostly such
classes (full nodes, idle nodes of one model). Each summary carries a signature of its cards'
states, so one decision answers each class once and every other node of it with a lookup. A
pod that no card anywhere has the memory for is answered without even that: each state's
reason for it is made with the state.
"""

from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter

from hami.engine import reasons as r
from hami.engine.capacity import ALL_CORES, MEMO_KEY, Capacity, capacity_of
from hami.engine.checks import type_ok
from hami.engine.model import PERCENTAGE_UNSET, CardScores, NodeState, PodRequest
from hami.engine.policy import CardFilter, PodOptions
from hami.engine.score import DEFAULT_WEIGHTS, card_scores

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
        cap = node.memo.get(MEMO_KEY, _UNSEEN)
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
        caps = list(map(dict.get, map(_MEMO, nodes), repeat(MEMO_KEY)))
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
