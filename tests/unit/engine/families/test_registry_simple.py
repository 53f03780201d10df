"""The registry holds issue 31's simple families in HAMi's order, and their wire names live in
their own modules alone."""

from pathlib import Path

from hami.engine.families import amd, awsneuron, biren, cambricon, iluvatar, mthreads, vastai
from hami.engine.families.registry import FAMILIES

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
    types = [f.wire.type for f in FAMILIES]
    assert len(types) == len(set(types))
    ours = [t for t in types if t in OURS]
    assert ours == [
        "MLU", "Mthreads", "AWSNeuron", "AMD", "Vastai", "Biren",
        "MR-V100", "MR-V50", "BI-V150", "BI-V100",
    ]  # fmt: skip


def test_wire_names_stay_in_their_module() -> None:
    sources = {p: p.read_text() for p in ROOT.rglob("*.py")}
    for family in FAMILIES:
        module = OURS.get(family.wire.type)
        if module is None:
            continue
        w = family.wire
        names = [
            *w.resources.all(),
            w.register_annotation,
            w.handshake_annotation,
            w.to_allocate_annotation,
            w.allocated_annotation,
            w.use_uuid,
            w.nouse_uuid,
            w.use_type,
            w.nouse_type,
        ]
        for path, text in sources.items():
            if path.name in (f"{module}.py", "registry.py"):
                continue
            for name in filter(None, names):
                assert name not in text, f"{name} appears in {path}"
