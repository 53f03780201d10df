"""Our quantity parser agrees with a real kube-apiserver on every value of the unit tables.

Each value goes, in a pod created with --dry-run=server, into a container's memory limit
(memory takes fractions; extended resources must be whole) and an emptyDir's sizeLimit.
kube-apiserver either cannot decode it, or stores it in canonical form: exactly in sizeLimit,
rounded up to a milli-unit in limits (API defaulting rounds every ResourceList, so that is what
the webhook sees). A negative value is refused by validation, which quotes the limit's
canonical form. Our value of the original must equal our value of each canonical form (after
the same milli rounding for limits), and what kube-apiserver cannot decode we must refuse.
"""

from __future__ import annotations

import json
import math
import random
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction

import pytest

from hami.engine.quantity import QuantityError, parse_quantity
from tests.reference.quantities import ACCEPTED, REFUSED

from .kube import Kube

pytestmark = pytest.mark.e2e

NEGATIVE = re.compile(
    r'limits\[memory\]: Invalid value: "([^"]*)": must be greater than or equal to 0'
)
# kube-apiserver stores these; we refuse them as beyond 10^1000 (see hami/engine/quantity.py).
OUT_OF_RANGE = ["1e1000", "-1e1001"]


def pod(value: str) -> str:
    container = {
        "name": "c",
        "image": "busybox",
        "resources": {"limits": {"memory": value}},
        "volumeMounts": [{"name": "v", "mountPath": "/v"}],
    }
    spec = {"containers": [container], "volumes": [{"name": "v", "emptyDir": {"sizeLimit": value}}]}
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q"}, "spec": spec}
    # Non-ASCII stays raw, as kubectl would send a manifest written by hand.
    return json.dumps(manifest, ensure_ascii=False)


@dataclass(frozen=True)
class Stored:
    limit: str  # canonical, rounded up to a milli-unit
    size: str | None  # canonical and exact; None for a negative value (validation refuses it)


def stored_as(kube: Kube, namespace: str, value: str) -> Stored | None:
    """How kube-apiserver stores `value`, or None when it cannot decode it."""
    result = kube(
        "create", "--dry-run=server", "-o", "json", "-n", namespace, "-f", "-",
        stdin=pod(value),
        check=False,
    )  # fmt: skip
    if result.returncode == 0:
        spec = json.loads(result.stdout)["spec"]
        limit = spec["containers"][0]["resources"]["limits"]["memory"]
        return Stored(limit, spec["volumes"][0]["emptyDir"]["sizeLimit"])
    negative = NEGATIVE.search(result.stderr)
    if negative:
        return Stored(negative[1], None)
    assert "quantit" in result.stderr, result.stderr  # a decoding error, not something else
    return None


def random_values(seed: int, count: int) -> list[str]:
    """Quantity-like strings; exponents stay small (kube-apiserver computes them exactly)."""
    rng = random.Random(seed)

    def digits(most: int) -> str:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(0, most)))

    out = []
    for _ in range(count):
        text = rng.choice(["", "+", "-"]) + digits(22)
        if rng.random() < 0.5:
            text += "." + digits(14)
        text += rng.choice(
            ["", "m", "k", "Ki", "Ei", "E", "n", "e", "e-12", "E7", "i", "Mi3", ".1"]
        )
        out.append(text)
    return out


def verdicts(kube: Kube, namespace: str, values: list[str]) -> dict[str, Stored | None]:
    with ThreadPoolExecutor(8) as pool:
        return dict(
            zip(values, pool.map(lambda v: stored_as(kube, namespace, v), values), strict=True)
        )


def ours(value: str) -> Fraction | None:
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def milli(value: Fraction) -> Fraction:
    """Rounded away from zero to a multiple of 1/1000, as Quantity.RoundUp(-3) does."""
    rounded = Fraction(math.ceil(abs(value) * 1000), 1000)
    return -rounded if value < 0 else rounded


def assert_agrees(value: str, stored: Stored) -> None:
    parsed = parse_quantity(value)
    assert milli(parsed) == parse_quantity(stored.limit), (value, stored)
    if stored.size is not None:
        assert parsed == parse_quantity(stored.size), (value, stored)


def test_quantity_values_agree_with_kube_apiserver(kube: Kube, namespace: str) -> None:
    extra = random_values(12, 150)
    seen = verdicts(kube, namespace, [*ACCEPTED, *REFUSED, *OUT_OF_RANGE, *extra])
    for value, expected in ACCEPTED.items():
        stored = seen[value]
        assert stored is not None, f"kube-apiserver refused {value!r}"
        assert parse_quantity(value) == expected
        assert_agrees(value, stored)
    for value in REFUSED:
        assert seen[value] is None, f"kube-apiserver stored {value!r} as {seen[value]!r}"
    for value in OUT_OF_RANGE:
        assert seen[value] is not None and ours(value) is None
    for value in extra:
        stored = seen[value]
        if stored is None:
            assert ours(value) is None, f"we accept {value!r}, kube-apiserver does not"
        else:
            assert_agrees(value, stored)
