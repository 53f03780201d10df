"""One copy of equal immutable values held for many pods.

The cache keeps, per pod, what it asks for and what it holds on each card; across a cluster
most pods ask for one of a few shapes and hold one of a few shares, so equal values are kept
once. The table is bounded: past its bound it starts over, which costs copies, never
correctness (a value is used, never compared by identity).
"""

from typing import TypeVar

T = TypeVar("T")

LIMIT = 100_000
_table: dict[object, object] = {}


def shared(value: T) -> T:
    """The copy of `value` (hashable) already held, or `value` itself, now held."""
    found = _table.get(value)
    if found is not None:
        return found  # type: ignore[return-value]  # equal, so of the same type
    if len(_table) >= LIMIT:
        _table.clear()
    _table[value] = value
    return value
