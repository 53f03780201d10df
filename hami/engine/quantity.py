"""Kubernetes resource quantities (`1`, `1000`, `2Gi`, `500m`, `1e3`) as exact fractions."""

import re
from fractions import Fraction

_PATTERN = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([a-zA-Z]*|[eE][+-]?[0-9]+)$")

_SUFFIX: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Fraction:
    """Parse a quantity as the API server accepts it; ints (from YAML) are taken as is."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    match = _PATTERN.match(value.strip())
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity")
    number, suffix = match.groups()
    if suffix[:1] in ("e", "E"):
        return Fraction(number) * Fraction(10) ** int(suffix[1:])
    if suffix not in _SUFFIX:
        raise QuantityError(f"{value!r} has an unknown suffix {suffix!r}")
    return Fraction(number) * _SUFFIX[suffix]


def as_int64(value: object) -> int | None:
    """The integer value, or None where the quantity is not a whole number (Go's AsInt64)."""
    q = parse_quantity(value)
    if q.denominator != 1 or not -(2**63) <= q.numerator < 2**63:
        return None
    return q.numerator
