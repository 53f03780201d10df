"""The registry holds issue 31's simple families in HAMi's order, and their wire names live in
their own modules alone."""

from pathlib import Path

from hami.engine.families import amd, awsneuron, biren, cambricon, iluvatar, mthreads, vastai
from tests.builders import FAMILIES
from tests.unit.engine.families.kit import wire_names_outside

ROOT = Path(__file__).resolve().parents[4] / "hami"
OURS = {
    cambricon.FAMILY.wire.type: "cambricon",
    mthreads.FAMILY.wire.type: "mthreads",
    awsneuron.FAMILY.wire.type: "awsneuron",
    amd.FAMILY.wire.type: "amd",
    vastai.FAMILY.wire.type: "vastai",
    biren.FAMILY.wire.type: "biren",
    **{f.wire.type: "iluvatar" for f in iluvatar.FAMILIES},
}


def test_hami_order() -> None:
    # HAMi's InitDevicesWithConfig: ... Cambricon, ..., Moore Threads, ..., AWS Neuron, AMD,
    # Vastai, Biren, (Ascend chips), then each Iluvatar chip in the config's order.
    types = [f.wire.type for f in FAMILIES.members]
    assert len(types) == len(set(types))
    ours = [t for t in types if t in OURS]
    assert ours == [
        "MLU", "Mthreads", "AWSNeuron", "AMD", "Vastai", "Biren",
        "MR-V100", "MR-V50", "BI-V150", "BI-V100",
    ]  # fmt: skip


def test_wire_names_stay_in_their_module() -> None:
    for family in FAMILIES.members:
        module = OURS.get(family.wire.type)
        if module is not None:
            home = ROOT / "engine" / "families" / f"{module}.py"
            assert wire_names_outside(family, home, ROOT) == []
