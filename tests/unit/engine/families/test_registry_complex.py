"""The registry holds Ascend, Enflame and Kunlunxin in HAMi's order; their wire names live
in their own modules alone; every sample registration decodes."""

from pathlib import Path

import pytest

from hami.engine.families import ascend, enflame, kunlun
from hami.engine.families.base import Family, NodeFacts
from tests.builders import FAMILIES
from tests.families_samples import SAMPLE_ALLOCATABLE, SAMPLE_NODE
from tests.unit.engine.families.kit import wire_names_outside

ROOT = Path(__file__).resolve().parents[4] / "hami"
FAMILY_ROOT = ROOT / "engine" / "families"
OURS: dict[str, Path] = {
    **{f.wire.type: FAMILY_ROOT / "ascend" for f in ascend.from_config(ascend.DEFAULT_VNPUS)},
    enflame.WHOLE_FAMILY.wire.type: FAMILY_ROOT / "enflame",
    enflame.DRS_FAMILY.wire.type: FAMILY_ROOT / "enflame",
    kunlun.WHOLE_FAMILY.wire.type: FAMILY_ROOT / "kunlun.py",
    kunlun.VXPU_FAMILY.wire.type: FAMILY_ROOT / "kunlun.py",
}


def test_hami_order() -> None:
    # HAMi's InitDevicesWithConfig: ..., Enflame GCU, Enflame, ..., kunlun, XPU, ..., then each
    # Ascend chip kind of the device config (the chart's seven).
    ours = [f.wire.type for f in FAMILIES.members if f.wire.type in OURS]
    assert ours == [
        "GCU", "Enflame", "kunlun", "XPU",
        "Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4-1", "Ascend910B4", "Ascend310P",
        "Ascend910C",
    ]  # fmt: skip


def test_wire_names_stay_in_their_module() -> None:
    for family in FAMILIES.members:
        home = OURS.get(family.wire.type)
        if home is not None:
            assert wire_names_outside(family, home, ROOT) == []


@pytest.mark.parametrize("kind", ["Ascend910B3", "GCU", "Enflame", "kunlun", "XPU"])
def test_every_sample_registration_decodes(kind: str) -> None:
    family: Family = FAMILIES.by_type()[kind]
    cards = family.decode_node(SAMPLE_NODE[kind], NodeFacts("n", SAMPLE_ALLOCATABLE[kind]))
    assert cards
    assert set(SAMPLE_ALLOCATABLE[kind]) <= set(family.wire.resources.all())
