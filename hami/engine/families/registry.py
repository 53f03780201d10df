"""The one list of device families, and lookups by the names the wire carries.

Adding a family is one module under hami.engine.families, one entry in FAMILIES, its
tests and its chart values.
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from hami.engine.families.base import Family
from hami.engine.families.hygon import HYGON


@dataclass(frozen=True)
class Families:
    """The families one process schedules, in the order HAMi registers them."""

    members: tuple[Family, ...] = ()

    def __iter__(self) -> Iterator[Family]:
        return iter(self.members)

    def by_type(self) -> Mapping[str, Family]:
        return {f.wire.type: f for f in self.members}

    def resource_names(self) -> tuple[str, ...]:
        """Every extended resource some family's pods ask for."""
        return tuple(n for f in self.members for n in f.wire.resources.all())

    def types(self) -> frozenset[str]:
        """The FamilyWire.type of every member: the device types that are not NVIDIA's."""
        return frozenset(f.wire.type for f in self.members)


# One entry per family, in the order HAMi registers them; keep it one list (issue 31).
FAMILIES = Families((HYGON,))
