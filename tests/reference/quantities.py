"""Kubernetes quantities as kube-apiserver parses them: the accepted ones with their values and
the refused ones."""

from fractions import Fraction

from hami.engine.quantity import INT64_MAX

NANO = Fraction(1, 10**9)

# text -> the value kube-apiserver stores
ACCEPTED: dict[str, Fraction] = {
    "1": Fraction(1),
    "0": Fraction(0),
    "1000": Fraction(1000),
    "-0": Fraction(0),
    "+1": Fraction(1),
    "-1": Fraction(-1),
    "007": Fraction(7),
    # Go's scanner takes a number without digits as 0 wherever its fast path runs.
    "-": Fraction(0),
    "+": Fraction(0),
    ".": Fraction(0),
    "-.": Fraction(0),
    "k": Fraction(0),
    "Ki": Fraction(0),
    "Ti": Fraction(0),
    "e3": Fraction(0),
    "n": Fraction(0),
    "0e-10": Fraction(0),
    # decimal forms
    ".5": Fraction(1, 2),
    "1.": Fraction(1),
    "+1.5": Fraction(3, 2),
    "-1.5": Fraction(-3, 2),
    "1.e3": Fraction(1000),
    "00.50": Fraction(1, 2),
    # decimal SI
    "1n": NANO,
    "1u": Fraction(1, 10**6),
    "1m": Fraction(1, 1000),
    "500m": Fraction(1, 2),
    "2k": Fraction(2000),
    "1M": Fraction(10**6),
    "1G": Fraction(10**9),
    "1T": Fraction(10**12),
    "1P": Fraction(10**15),
    "1E": Fraction(10**18),
    "1.5E": Fraction(15 * 10**17),
    # binary SI
    "1Ki": Fraction(1024),
    "1Mi": Fraction(2**20),
    "2Gi": Fraction(2**31),
    "1Ti": Fraction(2**40),
    "1Pi": Fraction(2**50),
    "1Ei": Fraction(2**60),
    "1.5Ki": Fraction(1536),
    "-1.5Ki": Fraction(-1536),
    "1.1Ki": Fraction(11264, 10),
    "5.Ei": Fraction(5 * 2**60),
    # decimal exponents
    "1e3": Fraction(1000),
    "1E3": Fraction(1000),
    "1e+3": Fraction(1000),
    "1e-3": Fraction(1, 1000),
    "1E-3": Fraction(1, 1000),
    "1e0": Fraction(1),
    "1e007": Fraction(10**7),
    "1.5e-9": Fraction(2) * NANO,
    "1e30": Fraction(10**30),  # exponents are not capped
    "-1e30": Fraction(-(10**30)),
    # everything is rounded away from zero to a multiple of 1e-9
    "0.1n": NANO,
    "-0.1n": -NANO,
    "1.5e-10": NANO,
    "1.0000000001": Fraction(1_000_000_001, 10**9),
    "0.0000000000000000000001Ei": Fraction(115_293, 10**9),
    # binary values are capped at 2^63-1, decimal ones are not
    "9Ei": Fraction(INT64_MAX),
    "-9Ei": Fraction(-INT64_MAX),
    "99999999999999999999Ki": Fraction(INT64_MAX),
    "99999999999999999999": Fraction(10**20 - 1),
    # Go parses the exponent as int64, then truncates it to int32
    "1e4294967296": Fraction(1),
    "1e9223372036854775807": Fraction(1, 10),
    # UnmarshalJSON trims Unicode spaces
    " 1 ": Fraction(1),
    "\u00a01Gi": Fraction(2**30),
    "1\u3000": Fraction(1),
}

REFUSED: list[str] = [
    "",
    " ",
    "x",
    "1x",
    "0x10",
    "1,5",
    "1_000",
    "1.2.3",
    "1 Gi",
    "1KI",
    "1ki",
    "1mi",
    "1i",
    ".5i",
    "1K",
    "1Ki3",
    "1k3",
    "1+",
    "1-3",
    "1e",
    "1e+",
    "1ee3",
    "1e3.5",
    "1e3k",
    "e",
    "e-10",  # no digits on Go's slow path
    ".e-10",
    "Pi",
    "Ei",
    "1e9223372036854775808",  # beyond int64
    "inf",
    "NaN",
    "\u0661",  # an Arabic-Indic digit: Go's scanner knows only ASCII digits
    "1\t",  # control characters reach kube-apiserver escaped, and are never trimmed
    "\n1",
    "1\u2028",
]
