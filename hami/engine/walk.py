"""HAMi's walk over a node's cards for one container, in preference order.

Each card gets HAMi's checks in HAMi's order, with what the walk has picked so
far: a change of NUMA node starts a numa-bind selection over, the namespace
quota counts the cards already picked, and a card in MIG mode is visited again
after each instance it gives, until no profile covering the ask has a free
placement left (HAMi's Fit steps back onto a MIG card), so one container may
hold several instances of one card.

Unlike HAMi, each card is counted once in the reason: under
AllocatedCardsInsufficientRequest when it gave the container something, else
under the first check it failed. HAMi counts instances, which on MIG cards
gives counts above the number of cards (`5/2 AllocatedCardsInsufficientRequest`;
tests/reference/hami_v210.py, DELIBERATE_DIFFERENCES "mig-reason-counts").
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations

from hami.engine import reasons as r
from hami.engine.checks import early_verdict, room_verdict, slot_verdict
from hami.engine.mig import instance_device
from hami.engine.model import Card, ContainerDevice, ContainerRequest
from hami.engine.policy import PodOptions

SortKey = Callable[[Card, float], tuple[float, ...]]
# Whether a container's cards, as picked so far, keep the pod within its namespace's quota.
QuotaGate = Callable[[tuple[ContainerDevice, ...]], bool]


@dataclass(frozen=True, slots=True)
class ContainerFit:
    devices: tuple[ContainerDevice, ...] | None  # None: does not fit
    reason: str  # empty when it fits
    scores: tuple[float, ...]  # per card, in registration order


def share(card: Card, req: ContainerRequest, cores: int) -> ContainerDevice:
    """The plain share the container asks of the card (not yet a MIG instance)."""
    return ContainerDevice(card.info.id, req.memory_on(card.info.share_base), cores)


def walk(
    cards: Sequence[Card],
    scores: tuple[float, ...],
    req: ContainerRequest,
    cores: int,
    opts: PodOptions,
    cordoned: frozenset[str],
    key: SortKey,
    links: dict[str, dict[str, int]] | None,
    quota: QuotaGate | None,
    start: Sequence[int],
) -> ContainerFit:
    """`start` holds the positions of `cards` in the order HAMi's sort starts from."""
    ordered = sorted(((cards[i], scores[i]) for i in start), key=lambda cs: key(*cs))[::-1]
    # HAMi's topology-aware choice collects every passing card; numa-bind takes the first ones.
    collect_all = opts.gpu_policy.topology and not opts.numa_bind
    counts: dict[str, int] = {}
    picked: list[ContainerDevice] = []
    prev_numa: int | None = None
    for card, _ in ordered:
        gave = 0
        while True:
            why = early_verdict(card, opts, cordoned)
            if why is None and opts.numa_bind and prev_numa != card.info.numa:
                if picked:
                    counts[r.NUMA_NOT_FIT] = counts.get(r.NUMA_NOT_FIT, 0) + _cards(picked)
                picked, prev_numa = [], card.info.numa
            why = why or slot_verdict(card, opts)
            plain = share(card, req, cores)
            device = instance_device(card, plain.usedmem, cores, picked) if card.info.mig else plain
            # A MIG instance counts against the quota as what it holds (the profile).
            if why is None and quota is not None and not quota((*picked, device or plain)):
                why = r.RESOURCE_QUOTA_NOT_FIT
            why = why or room_verdict(card, req, cores)
            if why is None and device is not None:
                picked.append(device)
                gave += 1
                if len(picked) == req.nums and not collect_all:
                    return ContainerFit(tuple(picked), "", scores)
                if card.info.mig:
                    continue
                break
            if not gave:
                reason = why or r.CARD_MIG_TOPOLOGY_INFEASIBLE
                counts[reason] = counts.get(reason, 0) + 1
            break
    if collect_all and len(picked) >= req.nums:
        chosen = by_topology(picked, req.nums, links or {})
        return ContainerFit(_placed_in_order(chosen, picked), "", scores)
    if picked:
        counts[r.ALLOCATED_CARDS_INSUFFICIENT] = _cards(picked)
    return ContainerFit(None, r.card_reasons(counts, len(cards)), scores)


def _cards(devices: Sequence[ContainerDevice]) -> int:
    return len({d.uuid for d in devices})


def _placed_in_order(
    chosen: tuple[ContainerDevice, ...], picked: Sequence[ContainerDevice]
) -> tuple[ContainerDevice, ...]:
    """HAMi places the chosen MIG instances again, in the order chosen: the n-th chosen on a
    card gets what the walk's n-th pick on that card got."""
    queues: dict[str, list[ContainerDevice]] = {}
    for d in picked:
        if d.mig is not None:
            queues.setdefault(d.uuid, []).append(d)
    return tuple(queues[d.uuid].pop(0) if d.mig is not None else d for d in chosen)


def by_topology(
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
