"""Kubernetes resource quantities (`1`, `2Gi`, `500m`, `1e3`, `.5`) as exact fractions.

Parsed as kube-apiserver parses them (apimachinery v0.35 resource.ParseQuantity,
reached through Quantity.UnmarshalJSON), so a value the API server stores is a
value we read, and a value it refuses we refuse:

* grammar: `[+-]? digits? (. digits?)? suffix`, the suffix one of the decimal
  SI `n u m "" k M G T P E`, the binary SI `Ki Mi Gi Ti Pi Ei`, or `e`/`E` and a
  signed int64 exponent that Go then truncates to int32 (`1e4294967296` is 1);
  a number without digits is 0 (`-`, `.`, `k`, `Ti`) where Go's fast path takes
  it and an error where its slow path does (`Pi`, `Ei`, `e-10`);
* value: rounded away from zero to a multiple of 1e-9, and for binary suffixes
  capped at 2^63-1 in magnitude.

The one refusal kube-apiserver does not make: magnitudes of 10^1000 and more
(it accepts up to 10^2147483647, but an exact value that large takes gigabytes
to compute, and Go's int32 scale overflows near that end).
"""

import functools
import re
from fractions import Fraction

# Go's scanner (parseQuantityString) as one expression over the whole string; possessive
# because the scanner never gives back what a loop consumed (which also keeps it linear).
_SCAN = re.compile(r"([+-]?)([0-9]*+)(?:\.([0-9]*+))?([eEinumkKMGTP]*+[+-]?[0-9]*+)")
_EXPONENT = re.compile(r"[eE]([+-]?)0*([0-9]+)")
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_FIVES: dict[int, int] = {b: 5**b for b in (0, *_BINARY.values())}
# UnmarshalJSON trims Unicode spaces from the raw JSON text; ASCII control characters (and
# U+2028/U+2029, which Go encoders escape) can only arrive escaped there, so they stay.
_SPACE = " \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u202f\u205f\u3000"

INT64_MAX = 2**63 - 1
INT32_MIN = -(2**31)
NANO = 10**9
MAX_MAGNITUDE = 1000  # decimal digits before the point; see the module docstring
_TOO_LARGE = 10**MAX_MAGNITUDE


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity."""


def _shown(value: str) -> str:
    # Messages travel back to the user; an attacker's megabyte string need not.
    return repr(value) if len(value) <= 64 else f"{value[:48]!r}... ({len(value)} characters)"


def _suffix(suffix: str, value: str) -> tuple[int, bool]:
    """(exponent, binary) of a suffix, as apimachinery's suffixer interprets it."""
    if suffix in _DECIMAL:
        return _DECIMAL[suffix], False
    if suffix in _BINARY:
        return _BINARY[suffix], True
    match = _EXPONENT.fullmatch(suffix)
    # strconv.ParseInt(..., 64) refuses what int64 cannot hold.
    if match is None or len(match[2]) > 19:
        raise QuantityError(f"{_shown(value)} has an unknown suffix")
    exponent = int(match[1] + match[2])
    if not -(2**63) <= exponent <= INT64_MAX:
        raise QuantityError(f"{_shown(value)} has an exponent beyond int64")
    return (exponent + 2**31) % 2**32 + INT32_MIN, False  # Go's int32(parsed)


def _nanos(digits: str, point: int, binary_exponent: int) -> int:
    """digits * 10^(point - len(digits)) * 2^binary_exponent, in units of 1e-9 rounded up.

    Work stays proportional to len(digits): with the decimal value cut at 10^-(9 + b), the
    value in nano-units is (head + cut) * 2^b / 10^b = (head + cut) / 5^b with 0 <= cut < 1,
    so the digits cut off decide only whether to round up.
    """
    keep = point + 9 + binary_exponent  # digits at or above 10^-(9 + binary_exponent)
    significant = digits.rstrip("0")
    if keep <= 0:
        return 1
    whole, rest = divmod(int(significant[:keep].ljust(keep, "0")), _FIVES[binary_exponent])
    return whole + (1 if rest or len(significant) > keep else 0)


# Pods carry a handful of distinct quantities ("1", "1000", "16Gi") and every event of every pod
# is parsed again: each distinct text is parsed once. Fractions are immutable, and a text that
# is no quantity raises every time (lru_cache keeps no exceptions).
@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Fraction:
    text = value.strip(_SPACE)
    match = _SCAN.fullmatch(text)
    if not text or match is None:
        raise QuantityError(f"{_shown(value)} is not a quantity")
    sign, whole, fraction, suffix = match[1], match[2], match[3] or "", match[4]
    exponent, binary = _suffix(suffix, value)
    if not whole and not fraction and (exponent >= 50 if binary else exponent < -9):
        raise QuantityError(f"{_shown(value)} has no digits")
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return Fraction(0)
    if not binary and exponent - len(fraction) < INT32_MIN + 1:
        raise QuantityError(f"{_shown(value)} has an exponent out of range")
    # The value lies in [10^(point-1), 10^point) before the binary factor.
    point = len(whole) + (0 if binary else exponent) - (len(whole + fraction) - len(digits))
    if binary:
        # From 10^39 on (> 2^63) the cap applies without computing the value.
        nanos = INT64_MAX * NANO if point > 40 else _nanos(digits, point, exponent)
        nanos = min(nanos, INT64_MAX * NANO)
    elif point > MAX_MAGNITUDE:
        raise QuantityError(f"{_shown(value)} is 10^{MAX_MAGNITUDE} or more")
    else:
        nanos = _nanos(digits, point, 0)
    return Fraction(-nanos if sign == "-" else nanos, NANO)


def parse_quantity(value: object) -> Fraction:
    """Parse a quantity as kube-apiserver does; ints (JSON or YAML numbers) are taken as is."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        if abs(value) >= _TOO_LARGE:
            raise QuantityError(
                f"an integer of {value.bit_length()} bits is 10^{MAX_MAGNITUDE} or more"
            )
        return Fraction(value)
    if isinstance(value, float):
        # The decoded float is not the JSON text it came from (0.1 is not 1/10).
        raise QuantityError(f"{value!r} is not exact as a number; write it as a string")
    if not isinstance(value, str):
        raise QuantityError(f"a {type(value).__name__} is not a quantity")
    return _parse_text(value)


def as_int64(value: object) -> int | None:
    """The integer value, or None where the quantity is not a whole number (Go's AsInt64)."""
    q = parse_quantity(value)
    if q.denominator != 1 or not -(2**63) <= q.numerator < 2**63:
        return None
    return q.numerator
