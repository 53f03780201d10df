"""ResourceQuotas on the other families' memory and core resources, as HAMi v2.10's
pkg/device/quota.go reads and counts them (hami.engine.familyquota): table tests."""

from typing import Any

import pytest

from hami.engine.familyquota import (
    FamilyQuota,
    card_amounts,
    family_limits,
    quota_names,
    requested_amounts,
    tightest,
)
from hami.engine.model import FamilyRequest, PodRequest
from tests.builders import FAMILIES


def test_every_familys_memory_and_core_resources_are_managed() -> None:
    names = quota_names(families=FAMILIES)
    for family in FAMILIES.others:
        wire = family.wire.resources
        assert {n for n in (wire.memory, wire.cores) if n} <= names
        # A count is never a quota HAMi manages (its IsManagedQuota: memory and core only).
        assert wire.count not in names or wire.count in (wire.memory, wire.cores)
    assert "hygon.com/dcumem" in names and "huawei.com/Ascend910B3-core" in names
    assert "nvidia.com/gpumem" not in names  # NVIDIA's are hami.engine.quota's


@pytest.mark.parametrize(
    ("hard", "limits"),
    [
        ({"limits.hygon.com/dcumem": "8000"}, {"hygon.com/dcumem": 8000}),
        ({"limits.hygon.com/dcucores": "50"}, {"hygon.com/dcucores": 50}),
        ({"limits.amd.com/gpumem": "16Gi"}, {"amd.com/gpumem": 16 * 2**30}),
        ({"limits.cambricon.com/mlu.smlu.vmemory": "0"}, {"cambricon.com/mlu.smlu.vmemory": 0}),
        # HAMi reads the limits.* form only, and skips what AsInt64 refuses.
        ({"hygon.com/dcumem": "8000", "requests.hygon.com/dcumem": "8000"}, {}),
        ({"limits.hygon.com/dcumem": "0.5"}, {}),
        # Counts are not managed: kube-apiserver's own quota counts them.
        ({"limits.hygon.com/dcunum": "2", "limits.nvidia.com/gpumem": "1"}, {}),
    ],
)
def test_the_limits_read_from_a_quota(hard: dict[str, Any], limits: dict[str, int]) -> None:
    assert family_limits(hard, families=FAMILIES) == limits


def test_several_quotas_of_a_namespace_all_hold() -> None:
    assert tightest([{"a": 5, "b": 1}, {"a": 3}, {"c": 0}]) == {"a": 3, "b": 1, "c": 0}


def test_a_pods_cards_count_under_their_familys_names() -> None:
    held = {
        "dcu-0": ("DCU", 2000, 10),
        "dcu-1": ("DCU", 1000, 30),
        "mlu-0": ("MLU", 16, 20),
        "va-0": ("Vastai", 0, 0),  # count only: nothing to count
        "gpu-0": ("NVIDIA", 5000, 50),  # not a family here
    }
    assert card_amounts(held, families=FAMILIES) == {
        "hygon.com/dcumem": 3000,
        "hygon.com/dcucores": 40,
        "cambricon.com/mlu.smlu.vmemory": 16,
        "cambricon.com/mlu.smlu.vcore": 20,
    }


def dcu(nums: int, mem: int, cores: int = 0) -> tuple[FamilyRequest, ...]:
    return (FamilyRequest("DCU", nums, mem, coresreq=cores),)


@pytest.mark.parametrize(
    ("init", "app", "asked"),
    [
        ((), (dcu(2, 1000, 10),), {"DCU": {"hygon.com/dcumem": 2000, "hygon.com/dcucores": 20}}),
        # App containers add up; init containers run one at a time, the larger wins.
        (
            (dcu(1, 5000),),
            (dcu(1, 1000), dcu(1, 1000)),
            {"DCU": {"hygon.com/dcumem": 5000, "hygon.com/dcucores": 0}},
        ),
        (
            (dcu(1, 1000),),
            (dcu(1, 1500), dcu(1, 1000)),
            {"DCU": {"hygon.com/dcumem": 2500, "hygon.com/dcucores": 0}},
        ),
        # A whole card (no memory, no cores asked) counts nothing here, as in HAMi.
        ((), (dcu(1, 0),), {}),
        ((), ((),), {}),
    ],
)
def test_what_the_webhook_counts(
    init: tuple[tuple[FamilyRequest, ...], ...],
    app: tuple[tuple[FamilyRequest, ...], ...],
    asked: dict[str, dict[str, int]],
) -> None:
    request = PodRequest(init=(None,) * len(init), app=(None,) * len(app), families=(*init, *app))
    assert requested_amounts(request, families=FAMILIES) == asked


@pytest.mark.parametrize(
    ("limits", "used", "asked", "fits"),
    [
        ({"hygon.com/dcumem": 8000}, {"hygon.com/dcumem": 5000}, 3000, True),
        ({"hygon.com/dcumem": 8000}, {"hygon.com/dcumem": 5000}, 3001, False),
        ({"hygon.com/dcumem": 0}, {}, 1, False),  # an explicit 0 blocks
        ({"hygon.com/dcucores": 50}, {"hygon.com/dcucores": 50}, 1, True),  # cores at the limit
        # Past a limit lowered under what the namespace holds: HAMi checks both resources of
        # a family asked for either.
        ({"hygon.com/dcucores": 50}, {"hygon.com/dcucores": 51}, 1, False),
        ({"amd.com/gpumem": 10}, {}, 30000, True),  # another family's limit
        ({}, {"hygon.com/dcumem": 10**9}, 1, True),
    ],
)
def test_fit_quota(limits: dict[str, int], used: dict[str, int], asked: int, fits: bool) -> None:
    quota = FamilyQuota(limits, used)
    assert (
        quota.fits({"DCU": {"hygon.com/dcumem": asked, "hygon.com/dcucores": 0}}, families=FAMILIES)
        is fits
    )
