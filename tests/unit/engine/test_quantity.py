"""Quantities parse as kube-apiserver parses them (apimachinery v0.35 resource.ParseQuantity).

The tables are also what tests/e2e/test_quantity.py sends to a real kube-apiserver, which
checks that it agrees with every row.
"""

from fractions import Fraction

import pytest

from hami.engine.quantity import QuantityError, as_int64, parse_quantity
from tests.reference.quantities import ACCEPTED, REFUSED


@pytest.mark.parametrize(("text", "value"), ACCEPTED.items(), ids=repr)
def test_accepted_quantities_have_kubernetes_values(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", REFUSED, ids=repr)
def test_refused_quantities_raise_quantity_error(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(7, Fraction(7)), (-3, Fraction(-3)), (2**70, Fraction(2**70))],
)
def test_integers_are_taken_as_is(value: int, expected: Fraction) -> None:
    assert parse_quantity(value) == expected


@pytest.mark.parametrize("value", [True, None, 1.5, 0.1, [], {}, b"1"], ids=repr)
def test_other_types_raise_quantity_error(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)


@pytest.mark.parametrize("text", ["1e1000", "1" * 1001, "1e2147483647"])
def test_magnitudes_from_10_to_the_1000_are_refused_as_out_of_range(text: str) -> None:
    # kube-apiserver accepts these (and may take minutes to compute them): our one deviation.
    with pytest.raises(QuantityError, match=r"10\^1000 or more"):
        parse_quantity(text)
    with pytest.raises(QuantityError, match=r"10\^1000 or more"):
        parse_quantity(10**1000)


@pytest.mark.parametrize(
    "text",
    [
        "1" * 3_000_000 + "x",
        "0." + "0" * 3_000_000 + "1",
        "1." + "7" * 3_000_000 + "Ki",
        "1" * 3_000_000 + "e-3000000",
        "1e-2147483647",
        "9" * 3_000_000 + "Ei",
    ],
    ids=lambda t: f"{t[:6]}..{t[-6:]}",
)
# A parse whose work grew with the exponent, not the text, would run for minutes (as
# kube-apiserver's may): the timeout catches that hang; it is no bound on a machine's speed.
@pytest.mark.timeout(60)
def test_work_is_bounded_by_the_length_of_the_text(text: str) -> None:
    message = ""
    try:
        parse_quantity(text)
    except QuantityError as e:
        message = str(e)
    assert len(message) < 200  # the message does not echo the megabytes


def test_error_messages_name_the_value() -> None:
    with pytest.raises(QuantityError, match="'1ki' has an unknown suffix"):
        parse_quantity("1ki")


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", 1), ("2k", 2000), ("1Ki", 1024), ("1e3", 1000), (7, 7), ("1.5", None), ("1e19", None)],
)
def test_as_int64(value: object, expected: int | None) -> None:
    assert as_int64(value) == expected
