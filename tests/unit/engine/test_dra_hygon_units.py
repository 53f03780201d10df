"""Hygon's DRA driver (HYGON-AI/k8s-hcu-dra-driver) read as HAMi's DCUs: `cores` in compute
units converted to and from the percent a pod writes, the `slices` capacity as the card's task
bound, and its devices, which carry no number, ordered by their PCI-address names. The slices
are the test's (tests/draobjects.py's dcu_device: made-up UUIDs; a K100_AI's 120 units)."""

import pytest

from hami.cache.store import ClusterCache
from hami.engine.dra.device import to_percent, to_units
from hami.engine.families.hygon import DRA_DRIVER
from hami.engine.requests import ResourceDefaults
from tests.builders import FAMILIES
from tests.draobjects import allocated_claim, dcu_device, mib, resource_slice
from tests.fakes.clock import Clock


@pytest.mark.parametrize(
    ("percent", "units", "asked", "counted"),
    [
        (30, 120, 36, 30),  # whole units: the round trip gives the percent back
        (25, 120, 30, 25),
        (100, 120, 120, 100),
        (0, 120, 0, 0),
        (33, 120, 40, 34),  # 39.6 units asked as 40, which are 33.3 percent: counted as 34
        (1, 120, 2, 2),
        (50, 60, 30, 50),  # a card of fewer units than percent: one unit is 1.67 percent
        (2, 60, 2, 4),
        (100, 64, 64, 100),
    ],
)
def test_a_percent_is_asked_in_units_rounded_up_and_counted_back_rounded_up(
    percent: int, units: int, asked: int, counted: int
) -> None:
    assert to_units(percent, units) == asked
    assert to_percent(asked, units) == counted


def test_the_conversion_never_asks_more_than_the_card_and_never_counts_less_than_asked() -> None:
    for units in (1, 7, 60, 64, 100, 120, 128):
        for percent in range(101):
            asked = to_units(percent, units)
            assert asked <= units
            assert percent <= to_percent(asked, units) <= 100


def cache() -> ClusterCache:
    """Node h: two K100_AI DCUs, listed in the slice out of PCI order (as a Go map lists them)."""
    out = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    dcus = [
        dcu_device("0000:86:00.0", "DCU-b", memory_mib=65536),
        dcu_device("0000:3b:00.0", "DCU-a", memory_mib=65536),
    ]
    out.dra.replace_slices([resource_slice("h", dcus, driver=DRA_DRIVER, name="h-dcus")])
    return out


def test_a_dcu_is_a_card_of_100_percent_shared_by_its_slices_ordered_by_pci_address() -> None:
    cards = cache().dra_view()["h"].families["DCU"]
    assert [(c.info.id, c.info.index) for c in cards] == [("DCU-a", 0), ("DCU-b", 1)]
    assert {(c.info.devcore, c.info.count, c.info.devmem, c.info.type) for c in cards} == {
        (100, 4, 65536, "DCU-K100_AI")
    }


def test_the_compute_units_a_claim_consumed_are_counted_as_the_percent_of_the_card() -> None:
    c = cache()
    consumed = {"memory": mib(4000), "cores": "36", "slices": "1"}
    claim = allocated_claim("a", "ns", "h", [("hcu-0000-3b-00-0", consumed)], driver=DRA_DRIVER)
    c.dra.replace_claims([claim])
    used = {card.info.id: card.usage for card in c.dra_view()["h"].families["DCU"]}
    assert (used["DCU-a"].used, used["DCU-a"].usedmem, used["DCU-a"].usedcores) == (1, 4000, 30)
    assert c.dra.compute_units("h") == {"DCU-a": 120, "DCU-b": 120}
