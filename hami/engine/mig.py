"""Dynamic MIG as HAMi v2.10 does it: which profile and placement a container gets on a card.

A card registered in `mig` mode lists the profiles it offers, each with the placements NVML
reports for it. A container gets the smallest profile (by memory, then slices, ties in the
registration's order) that covers its memory and cores and has a placement overlapping no
instance already on the card: those of running pods and those this pod's earlier
containers took. 1g and 3g profiles try their highest placements first, the others their
lowest, as HAMi does, so that small instances fill the card from the top and leave room for
the large ones at slice 0.

HAMi picks the profile by memory alone and lets `nvidia.com/gpucores` only gate the card;
here the profile must cover the cores too (tests/reference/hami_v210.py,
DELIBERATE_DIFFERENCES "mig-cores").
"""

from collections.abc import Iterable, Mapping, Sequence

from hami.engine.model import (
    Card,
    ContainerDevice,
    MigInstance,
    MigPlacement,
    MigProfile,
    PodDevices,
    Usage,
)
from hami.engine.policy import PodOptions


def placement_order(profile: str, placements: Iterable[MigPlacement]) -> list[MigPlacement]:
    """The order HAMi tries a profile's placements in: highest start first for 1g and 3g."""
    high_first = profile.startswith(("1g.", "3g."))
    return sorted(placements, key=lambda p: -p.start if high_first else p.start)


def _placements(profiles: Sequence[MigProfile], name: str) -> tuple[MigPlacement, ...]:
    # HAMi looks a profile's placements up by name: the first profile of that name wins.
    return next(p.placements for p in profiles if p.name == name)


def overlapped(placement: MigPlacement, occupied: Iterable[MigPlacement]) -> MigPlacement | None:
    """The first of `occupied` that `placement` overlaps: what decides whether a MIG card has
    room, at /filter for a candidate and at /bind's re-check for the chosen instance."""
    return next((o for o in occupied if placement.overlaps(o)), None)


def free_placement(
    profiles: Sequence[MigProfile], occupied: Sequence[MigPlacement], name: str
) -> MigPlacement | None:
    for candidate in placement_order(name, _placements(profiles, name)):
        if overlapped(candidate, occupied) is None:
            return candidate
    return None


def candidates(profiles: Sequence[MigProfile]) -> list[MigProfile]:
    """Profiles in the order they are tried: least memory first, then fewest slices."""
    return sorted(profiles, key=lambda p: (p.memory, p.slices))


def select(
    profiles: Sequence[MigProfile], occupied: Sequence[MigPlacement], memory: int, cores: int
) -> tuple[MigProfile, MigPlacement] | None:
    """The profile and placement a container asking `memory` MiB and `cores` percent gets."""
    for profile in candidates(profiles):
        if profile.memory < memory or profile.core < cores:
            continue
        placement = free_placement(profiles, occupied, profile.name)
        if placement is not None:
            return profile, placement
    return None


def instance_device(
    card: Card, memory: int, cores: int, taken: Sequence[ContainerDevice]
) -> ContainerDevice | None:
    """The device a container gets on MIG card `card` after the `taken` ones of its own (any
    card), or None when no profile covering the ask has a free placement. It holds what the
    profile holds."""
    occupied = [i.placement for i in card.usage.mig]
    occupied += [d.mig.placement for d in taken if d.uuid == card.info.id and d.mig is not None]
    chosen = select(card.info.mig_profiles, occupied, memory, cores)
    if chosen is None:
        return None
    profile, placement = chosen
    instance = MigInstance(profile.name, placement)
    return ContainerDevice(card.info.id, profile.memory, profile.core, mig=instance)


def label(instance: MigInstance) -> str:
    """`3g.20gb@4-7`: the profile and the memory slices its placement spans."""
    first, last = instance.placement.start, instance.placement.start + instance.placement.size - 1
    return f"{instance.profile}@{first}" + (f"-{last}" if last != first else "")


def clash(card: Card, own: Sequence[MigInstance]) -> str | None:
    """Which of a pod's instances `own` (counted on `card` among the rest) overlaps an
    instance of someone else's, or None. Only placements decide: profile cores are rounded
    up (a full A100 counts 102 % or 105 %) and profile memory may exceed the registered."""
    others = (card.usage - Usage(mig=tuple(own))).mig
    placements = [o.placement for o in others]
    for mine in own:
        hit = overlapped(mine.placement, placements)
        if hit is not None:
            return f"its MIG instance {label(mine)} overlaps {label(others[placements.index(hit)])}"
    return None


def blocked(card: Card, memory: int, cores: int) -> list[str]:
    """What stands in the way on a MIG card: for each profile that covers the ask, its
    placements in the order they are tried, each with the instances it overlaps."""
    profiles = card.info.mig_profiles
    out = []
    for profile in candidates(profiles):
        if profile.memory < memory or profile.core < cores:
            continue
        tried = []
        for placement in placement_order(profile.name, _placements(profiles, profile.name)):
            hits = [label(i) for i in card.usage.mig if placement.overlaps(i.placement)]
            where = label(MigInstance(profile.name, placement))
            tried.append(f"{where} overlaps {', '.join(hits)}" if hits else f"{where} is free")
        out.append("; ".join(tried) or f"{profile.name} has no placement")
    return out


def mig_request(cards: Sequence[Card], opts: PodOptions) -> bool:
    """HAMi's isMIGRequest: a container may take more instances than the node has cards when
    a card is in MIG mode and the pod's `nvidia.com/vgpu-mode`, if set, allows `mig`."""
    if opts.vgpu_mode is not None and "mig" not in opts.vgpu_mode:
        return False
    return any(c.info.mig for c in cards)


def untrusted(mig: bool, usage: Usage, stray: bool) -> bool:
    """HAMi's verdict on a card's MIG bookkeeping when it rebuilds usage from the pods: a MIG
    card some pod holds without a MIG allocation, a card not in MIG mode that carries one, and
    every MIG card of a node where an allocation names a card the node does not have, are
    marked unhealthy (CardNotHealth) until those pods are gone."""
    if mig:
        return usage.bare > 0 or stray
    return bool(usage.mig)


def pod_instances(devices: PodDevices) -> dict[str, tuple[MigInstance, ...]]:
    """The MIG instances of a decision or a reservation, by card."""
    out: dict[str, tuple[MigInstance, ...]] = {}
    for container in devices:
        for d in container:
            if d.mig is not None:
                out[d.uuid] = (*out.get(d.uuid, ()), d.mig)
    return out


def stray_instances(usage: Mapping[str, Usage], cards: Iterable[str]) -> bool:
    """Whether some MIG allocation names a card other than `cards` (the node's)."""
    known = set(cards)
    return any(u.mig for uuid, u in usage.items() if uuid not in known)
