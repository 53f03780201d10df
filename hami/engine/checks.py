"""HAMi's per-card checks for one container, in the order its Fit makes them.

Each returns the reason the card fails, or None. Split by where HAMi's walk
interleaves other steps between them: the NUMA node after the early checks,
the namespace quota after the slot checks, MIG placement after the room checks.
"""

from collections.abc import Sequence

from hami.engine import reasons as r
from hami.engine.mig import clash
from hami.engine.model import Card, ContainerRequest, DeviceInfo, MigInstance, Usage
from hami.engine.policy import PodOptions


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
    if opts.gpu_policy.mutex and card.usage.used > 0:
        return r.EXCLUSIVE_CONFLICT
    return None


def room_verdict(card: Card, req: ContainerRequest, cores: int) -> str | None:
    """HAMi's checks after the quota: is there room on the card."""
    info, u = card.info, card.usage
    if info.devmem - u.usedmem < req.memory_on(info.share_base):
        return r.CARD_INSUFFICIENT_MEMORY
    return core_verdict(info, u, cores)


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
    if info.devcore == 100 and cores == 100 and u.used > 0:
        return r.EXCLUSIVE_CONFLICT
    if info.devcore != 0 and u.usedcores == info.devcore and cores == 0:
        return r.CARD_COMPUTE_UNITS_EXHAUSTED
    return None


def no_room(card: Card, own: Sequence[MigInstance]) -> str | None:
    """Why `card`, its counted use including one pod's share (`own`: that pod's MIG instances
    on it), has no room for that share after all, or None: the rule /filter placed the share
    by, asked again at /bind. A MIG card has room while the pod's instances overlap no other
    (hami.engine.mig.clash); any other card while memory, cores and slots stay within it."""
    if card.info.mig:
        return clash(card, own)
    info, u = card.info, card.usage
    if u.usedmem > info.devmem:
        return f"{u.usedmem} MiB counted of {info.devmem}"
    if u.usedcores > info.devcore:
        return f"{u.usedcores} % of the cores counted of {info.devcore}"
    if u.used > info.count:
        return f"{u.used} tasks counted of {info.count}"
    return None
