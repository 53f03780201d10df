"""HAMi's per-card checks for one container, in the order its Fit makes them.

Each returns the reason the card fails, or None. Split by where HAMi's walk
interleaves other steps between them: the NUMA node after the early checks,
the namespace quota after the slot checks, MIG placement after the room checks.
"""

from collections.abc import Sequence
from typing import NamedTuple

from hami.engine import reasons as r
from hami.engine.mig import clash
from hami.engine.model import Card, ContainerRequest, DeviceInfo, MigInstance, Usage
from hami.engine.policy import PodOptions, filtered_out


def type_ok(card: Card, opts: PodOptions) -> bool:
    t = card.info.type.lower()
    if opts.use_types is not None and not any(u in t for u in opts.use_types):
        return False
    if any(n in t for n in opts.nouse_types):
        return False
    return opts.vgpu_mode is None or card.info.mode in opts.vgpu_mode


def _uuid_ok(card: Card, opts: PodOptions) -> bool:
    uuid = card.info.id
    if opts.use_uuids and uuid not in opts.use_uuids:
        return False
    return uuid not in opts.nouse_uuids


def early_verdict(card: Card, opts: PodOptions, cordoned: frozenset[str]) -> str | None:
    """HAMi's checks before it looks at the card's NUMA node."""
    if not card.healthy:
        return r.CARD_NOT_HEALTH
    if card.info.id in cordoned:
        return r.CARD_CORDONED
    if opts.selects_cards and not type_ok(card, opts):
        return r.CARD_TYPE_MISMATCH
    return None


def slot_verdict(card: Card, opts: PodOptions) -> str | None:
    """HAMi's checks after the NUMA node and before the quota."""
    if opts.selects_cards and not _uuid_ok(card, opts):
        return r.CARD_UUID_MISMATCH
    if card.info.count <= card.usage.used:
        return r.CARD_TIME_SLICING_EXHAUSTED
    return filtered_out(opts.gpu_policy.card_filters, card.usage.used)


def room_verdict(card: Card, req: ContainerRequest, cores: int) -> str | None:
    """HAMi's checks after the quota: is there room on the card (the room rule, `beyond`, with
    the share counted), then its rules on whole and exhausted cores."""
    info, u = card.info, card.usage
    over = beyond(info, u.used + 1, u.usedmem + req.memory_on(info.share_base), u.usedcores + cores)
    return over.reason if over is not None else core_rules(info, u, cores)


def verdict(
    card: Card, req: ContainerRequest, cores: int, opts: PodOptions, cordoned: frozenset[str]
) -> str | None:
    """Why this card cannot take the container, in HAMi's check order; None if it can."""
    return (
        early_verdict(card, opts, cordoned)
        or slot_verdict(card, opts)
        or room_verdict(card, req, cores)
    )


def core_verdict(info: DeviceInfo, u: Usage, cores: int) -> str | None:
    """HAMi's checks after the memory check, in its order; None if the card passes them."""
    if info.devcore - u.usedcores < cores:
        return r.CARD_INSUFFICIENT_CORE
    return core_rules(info, u, cores)


def core_rules(info: DeviceInfo, u: Usage, cores: int) -> str | None:
    """HAMi's checks after the room for the cores: 100 cores want the card alone, and a
    container asking none cannot join a card whose cores are all taken."""
    if info.devcore == 100 and cores == 100 and u.used > 0:
        return r.EXCLUSIVE_CONFLICT
    if info.devcore != 0 and u.usedcores == info.devcore and cores == 0:
        return r.CARD_COMPUTE_UNITS_EXHAUSTED
    return None


class Over(NamedTuple):
    """What a card counts more of than a family's fit lets it hold: HAMi's reason for that
    check, the amount counted and what the card holds."""

    reason: str
    counted: int
    held: int

    def __str__(self) -> str:
        return f"{self.counted} {_UNITS[self.reason]} counted of {self.held}"


_UNITS = {
    r.CARD_INSUFFICIENT_MEMORY: "MiB",
    r.CARD_INSUFFICIENT_CORE: "% of the cores",
    r.CARD_TIME_SLICING_EXHAUSTED: "tasks",
}


def beyond(
    held: DeviceInfo,
    used: int,
    usedmem: int,
    usedcores: int,
    *,
    cores: bool = True,
    tasks: bool = True,
) -> Over | None:
    """The first of memory, cores and tasks that a card counting this much holds more of than
    `held` (the card as a family's fit counts it) has; None while it holds no more.

    The one room rule: a fit asks it with the share it would give counted, and /bind asks it
    again with what the cache counts (hami.engine.recheck, through Family.room), so that the
    two cannot disagree. `cores` and `tasks` are False for a family whose fit counts neither."""
    if usedmem > held.devmem:
        return Over(r.CARD_INSUFFICIENT_MEMORY, usedmem, held.devmem)
    if cores and usedcores > held.devcore:
        return Over(r.CARD_INSUFFICIENT_CORE, usedcores, held.devcore)
    if tasks and used > held.count:
        return Over(r.CARD_TIME_SLICING_EXHAUSTED, used, held.count)
    return None


def no_room(card: Card, own: Sequence[MigInstance]) -> str | None:
    """NVIDIA's room rule at /bind: why `card`, its counted use including one pod's share
    (`own`: that pod's MIG instances on it), has no room for that share after all, or None. A
    MIG card has room while the pod's instances overlap no other (hami.engine.mig.clash, the
    rule its fit places instances by); any other card by `beyond`, as its fit's room_verdict."""
    if card.info.mig:
        return clash(card, own)
    info, u = card.info, card.usage
    over = beyond(info, u.used, u.usedmem, u.usedcores)
    return None if over is None else str(over)
