"""Cambricon behind the seam: steps from HAMi v2.10's pkg/device/cambricon (device.go, tests)."""

import pytest

from hami.engine.families import cambricon
from hami.engine.families.base import BindContext, FamilyRequest, NodeFacts
from hami.engine.model import Card, ContainerDevice, DeviceInfo
from tests.unit.engine.families.kit import Ask, Step, asked, card, check, ctr

F = cambricon.FAMILY
MLU = "cambricon.com/vmlu"
MEM, CORES = "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore"


def mlu(uuid: str, mem: int = 1280, **use: int | bool) -> Card:
    return card(DeviceInfo(uuid, 0, 100, mem, 100, "MLU"), **use)  # type: ignore[arg-type]


def req(nums: int, mem: int, cores: int) -> FamilyRequest:
    return FamilyRequest("MLU", nums, mem, 101, cores)


def test_cards_from_capacity() -> None:
    # HAMi's Test_GetNodeDevices: one vcore, one vmemory unit.
    assert F.decode_node({}, NodeFacts("test", {CORES: "1", MEM: "1"})) == (
        DeviceInfo("test-cambricon-mlu-0", 0, 100, 25600, 100, "MLU"),
    )
    infos = F.decode_node({}, NodeFacts("n", {CORES: "400", MEM: "384", MLU: "400"}))
    assert infos is not None
    assert [(d.id, d.index, d.devmem) for d in infos] == [
        (f"n-cambricon-mlu-{i}", i, 24576) for i in range(4)
    ]
    assert len(F.decode_node({}, NodeFacts("n", {CORES: "250"})) or ()) == 3  # rounded up
    assert F.decode_node({}, NodeFacts("n", {MEM: "384"})) is None  # no cores: not registered
    assert F.decode_node({}, NodeFacts("n", {CORES: "0"})) is None
    assert F.decode_node({}) is None  # the node's capacity is not known


@pytest.mark.parametrize(
    ("limits", "want"),
    [  # HAMi's Test_GenerateResourceRequests (count under our resource name)
        ({MLU: 1, MEM: 1000, CORES: 2}, (1, 256000, 101, 2)),
        ({MLU: 1, MEM: 1000}, (1, 256000, 101, 100)),  # all cores by default
        ({MLU: 1, CORES: 2}, (1, 0, 100, 2)),
        ({MLU: 1, MEM: "16Gi"}, None),
        ({MLU: 1, CORES: "1.5"}, (1, 0, 100, 100)),  # a fraction: the default stands
        ({"cambricon.com/mlu": 1}, None),  # the flag's default name is not the chart's
    ],
)
def test_requests(limits: dict[str, object], want: Ask) -> None:
    assert asked(F, limits) == want


STEPS = [
    Step(
        "HAMi: fit success",
        [mlu("dev-0", 128), mlu("dev-1", 128)],
        req(1, 64, 50),
        (("dev-1", 64, 50),),
    ),
    Step("HAMi: memory not enough", [mlu("d", 128)], req(1, 512, 50), "1/1 CardInsufficientMemory"),
    Step(
        "HAMi: core not enough",
        [mlu("d", 1024, usedcores=100)],
        req(1, 512, 50),
        "1/1 CardInsufficientCore",
    ),
    Step(
        "HAMi: use uuid mismatch",
        [mlu("dev-1")],
        req(2, 512, 50),
        "1/1 CardUuidMismatch",
        annotations={"cambricon.com/use-gpuuuid": "dev-0"},
    ),
    Step(
        "HAMi: nouse uuid",
        [mlu("dev-0")],
        req(2, 512, 50),
        "1/1 CardUuidMismatch",
        annotations={"cambricon.com/nouse-gpuuuid": "dev-0"},
    ),
    Step(
        "HAMi: card overused", [mlu("d", used=100)], req(1, 512, 50), "1/1 CardTimeSlicingExhausted"
    ),
    Step(
        "HAMi: core limit can't exceed 100",
        [mlu("dev-0")],
        req(1, 512, 120),
        (("dev-0", 512, 100),),
    ),
    Step(
        "HAMi: card exclusively",
        [mlu("d", used=20)],
        req(1, 512, 100),
        "1/1 ExclusiveDeviceAllocateConflict",
    ),
    Step(
        "HAMi: compute units exhausted",
        [mlu("d", used=20, usedcores=100)],
        req(1, 512, 0),
        "1/1 CardComputeUnitsExhausted",
    ),
    Step(
        "count alone: whole card, all cores",
        [mlu("a"), mlu("b", used=1, usedcores=10)],
        {MLU: 1},
        (("a", 1280, 100),),
    ),
    Step("memory units", [mlu("a")], {MLU: 1, MEM: 2, CORES: 10}, (("a", 512, 10),)),
    Step(
        "two devices",
        [mlu("a"), mlu("b")],
        {MLU: 2, MEM: 1, CORES: 30},
        (("b", 256, 30), ("a", 256, 30)),
    ),
    Step(
        "too few",
        [mlu("a", usedmem=1200), mlu("b")],
        {MLU: 2, MEM: 1, CORES: 30},
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory",
    ),
    Step(
        "mutex",
        [mlu("a"), mlu("b", used=1)],
        {MLU: 1, MEM: 1, CORES: 1},
        (("a", 256, 1),),
        mutex=True,
    ),
    Step("unhealthy", [mlu("a", healthy=False)], {MLU: 1, MEM: 1, CORES: 1}, "1/1 CardNotHealth"),
]


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_fit(step: Step) -> None:
    check(F, step)


def test_annotations() -> None:
    # HAMi's Test_PatchAnnotations, "leading container without device".
    dev = ContainerDevice("n-cambricon-mlu-0", 256000, 1, "MLU")
    text = ";n-cambricon-mlu-0,MLU,256000,1:;"
    assert F.annotations(((), (dev,))) == {
        "CAMBRICON_DSMLU_ASSIGNED": "false",
        "CAMBRICON_DSMLU_PROFILE": "0_1_1000",
        "hami.io/cambricon-mlu-devices-to-allocate": text,
        "hami.io/cambricon-mlu-devices-allocated": text,
    }
    # The profile names the first device's card index, cores and memory units.
    first = ContainerDevice("n-cambricon-mlu-3", 1000, 40, "MLU")
    other = ContainerDevice("n-cambricon-mlu-1", 512, 10, "MLU")
    got = F.annotations(((first, other), (other,)), BindContext("n", 1))
    assert got["CAMBRICON_DSMLU_PROFILE"] == "3_40_3"
    assert F.annotations(((), ())) == {}


def test_claim_and_lock() -> None:
    assert F.claim(ctr({MLU: 1}), {}).claimed
    assert not F.claim(ctr(None, {MLU: 1}), {}).claimed
    assert F.wire.lock_name == "cambricon.com/dsmlu.lock"


def test_sample_registration_decodes() -> None:
    from tests.families_samples import SAMPLE_ALLOCATABLE, SAMPLE_NODE

    infos = F.decode_node(SAMPLE_NODE["MLU"], NodeFacts("n", SAMPLE_ALLOCATABLE["MLU"]))
    assert infos is not None and len(infos) == 4
