"""HAMi v2.10's dynamic MIG rules, for the reference model in hami_v210: a test double.

Written from HAMi v2.10.0's pkg/device/nvidia/mig_topology.go (placement order
and overlap), pkg/device/nvidia/device.go (selectMigCandidate, CustomFilterRule,
AddResourceUsage), pkg/device/nvidia/mig_allocations.go (EncodeMigAllocations)
and pkg/scheduler/scheduler.go (getNodesUsage: MIG usage rebuilt from the
pods), following their structure; it shares no code with hami.engine.

Where hami-py differs on purpose the functions take the switch named after the
entry of hami_v210.DELIBERATE_DIFFERENCES and the model sets it as hami-py does.
"""

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    """device.MigProfile: name, memoryMB, core, sliceCount, placements as (start, size)."""

    name: str
    memory: int
    core: int
    slices: int
    placements: tuple[tuple[int, int], ...]


# (profile name, start, size): one entry of a card's MigAllocationsInUse.
Instance = tuple[str, int, int]


def prefer_high(profile: str) -> bool:
    return profile.startswith("1g.") or profile.startswith("3g.")


def ordered_placements(
    profile: str, placements: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """orderedMigPlacements: sort.SliceStable by start, descending for 1g and 3g."""
    out = list(placements)
    out.sort(key=lambda p: -p[0] if prefer_high(profile) else p[0])
    return out


def find_profile(profiles: Sequence[Profile], name: str) -> Profile | None:
    for p in profiles:
        if p.name == name:
            return p
    return None


def overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def select_placement(
    profiles: Sequence[Profile], occupied: Sequence[tuple[int, int]], name: str
) -> tuple[int, int] | None:
    profile = find_profile(profiles, name)
    if profile is None:
        return None
    for candidate in ordered_placements(name, profile.placements):
        if not any(overlap(candidate, o) for o in occupied):
            return candidate
    return None


def select_candidate(
    profiles: Sequence[Profile],
    occupied: Sequence[tuple[int, int]],
    memory: int,
    cores: int,
    mig_cores: bool,
) -> tuple[Profile, tuple[int, int]] | None:
    """selectMigCandidate: profiles by memory then slices (stable), the first that covers the
    memory with a free placement. `mig_cores`: it must cover the cores too ("mig-cores")."""
    candidates = sorted(profiles, key=lambda p: (p.memory, p.slices))
    for profile in candidates:
        if profile.memory < memory:
            continue
        if mig_cores and profile.core < cores:
            continue
        placement = select_placement(profiles, occupied, profile.name)
        if placement is not None:
            return profile, placement
    return None


def custom_filter_rule(
    profiles: Sequence[Profile],
    in_use: Sequence[Instance],
    earlier: Sequence[tuple[int, int]],
    memory: int,
    cores: int,
    mig_cores: bool,
) -> bool:
    """CustomFilterRule on a MIG card: the container's earlier picks on this card (their
    (MiB, cores) as asked) are placed first, then this one."""
    occupied = [(s, n) for _, s, n in in_use]
    for mem, cor in earlier:
        got = select_candidate(profiles, occupied, mem, cor, mig_cores)
        if got is None:
            return False
        occupied.append(got[1])
    return select_candidate(profiles, occupied, memory, cores, mig_cores) is not None


def add_resource_usage(
    profiles: Sequence[Profile], in_use: list[Instance], memory: int, cores: int, mig_cores: bool
) -> tuple[Profile, tuple[int, int]]:
    """AddResourceUsage on a MIG card: the instance is chosen again against what the card
    holds now and recorded on it."""
    got = select_candidate(profiles, [(s, n) for _, s, n in in_use], memory, cores, mig_cores)
    assert got is not None, "CustomFilterRule passed, so a placement is free"
    profile, placement = got
    in_use.append((profile.name, *placement))
    return profile, placement
