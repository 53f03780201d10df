"""MIG profiles as HAMi v2.10's device plugin registers them from NVML, for tests.

Memory in MiB (NVML's memorySizeMB), cores the profile's SMs in percent of the
whole card's, rounded up (register.go, discoverMigProfiles), placements as NVML
lists them. Data only: the reference model reads them as they are, the engine
through `engine_profiles`.
"""

from collections.abc import Iterable
from typing import Any

from hami.engine.codec import encode_profiles
from hami.engine.model import MigPlacement, MigProfile
from tests.reference.hami_v210_mig import Profile


def _p(name: str, memory: int, core: int, slices: int, starts: Iterable[int], size: int) -> Profile:
    return Profile(name, memory, core, slices, tuple((s, size) for s in starts))


# NVIDIA A100-SXM4-40GB: 40,960 MiB registered; 98 SMs in 7 compute slices.
A100_40GB_MEMORY = 40960
A100_40GB = (
    _p("1g.5gb", 4864, 15, 1, range(7), 1),
    _p("2g.10gb", 9856, 29, 2, (0, 2, 4), 2),
    _p("3g.20gb", 19968, 43, 3, (0, 4), 4),
    _p("4g.20gb", 19968, 58, 4, (0,), 4),
    _p("7g.40gb", 40192, 100, 7, (0,), 8),
)
# NVIDIA H100 80GB HBM3: 81,559 MiB registered; 132 SMs.
H100_80GB_MEMORY = 81559
H100_80GB = (
    _p("1g.10gb", 9984, 13, 1, range(7), 1),
    _p("1g.20gb", 20096, 20, 1, (0, 2, 4, 6), 2),
    _p("2g.20gb", 20096, 25, 2, (0, 2, 4), 2),
    _p("3g.40gb", 40448, 46, 3, (0, 4), 4),
    _p("4g.40gb", 40448, 49, 4, (0,), 4),
    _p("7g.80gb", 81152, 100, 7, (0,), 8),
)


def allowlisted(profiles: tuple[Profile, ...], names: Iterable[str]) -> tuple[Profile, ...]:
    """The profiles a migProfileAllowlist names, in NVML's order (as the plugin lists them)."""
    wanted = set(names)
    return tuple(p for p in profiles if p.name in wanted)


# The worked example: 1g.5gb, 2g.10gb, 3g.20gb and 7g.40gb allowed on an A100-40GB.
A100_EXAMPLE = allowlisted(A100_40GB, ("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"))


def engine_profiles(profiles: Iterable[Profile]) -> tuple[MigProfile, ...]:
    return tuple(
        MigProfile(
            p.name, p.memory, p.core, p.slices, tuple(MigPlacement(*x) for x in p.placements)
        )
        for p in profiles
    )


def registration(profiles: Iterable[Profile]) -> list[dict[str, Any]]:
    """`migProfiles` of the node annotation, as the device plugin writes it."""
    return encode_profiles(engine_profiles(profiles))
