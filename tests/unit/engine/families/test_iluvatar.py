"""Iluvatar behind the seam: steps from HAMi v2.10's pkg/device/iluvatar (device.go and tests)."""

import pytest

from hami.engine.codec import CodecError
from hami.engine.families import iluvatar
from hami.engine.families.base import FamilyRequest
from hami.engine.model import Card, ContainerDevice, DeviceInfo
from hami.engine.requests import RequestError
from tests.unit.engine.families.kit import Ask, Step, asked, card, check, ctr

F = iluvatar.FAMILIES[0]  # MR-V100
GPU, MEM, CORES = (
    "iluvatar.ai/MR-V100-vgpu",
    "iluvatar.ai/MR-V100.vMem",
    "iluvatar.ai/MR-V100.vCore",
)
REG_KEY = "hami.io/node-MR-V100-register"


def gpu(uuid: str, mem: int = 128, **use: int | bool) -> Card:
    return card(DeviceInfo(uuid, 0, 100, mem, 100, "MR-V100"), **use)  # type: ignore[arg-type]


def req(nums: int, mem: int = 0, cores: int = 0) -> FamilyRequest:
    return FamilyRequest("MR-V100", nums, mem, 101 if mem else 100, cores)


def test_chips_and_names() -> None:
    assert [f.wire.type for f in iluvatar.FAMILIES] == ["MR-V100", "MR-V50", "BI-V150", "BI-V100"]
    w = iluvatar.FAMILIES[2].wire
    assert w.resources.all() == (
        "iluvatar.ai/BI-V150-vgpu",
        "iluvatar.ai/BI-V150.vMem",
        "iluvatar.ai/BI-V150.vCore",
    )
    assert (w.register_annotation, w.handshake_annotation) == (
        "hami.io/node-BI-V150-register",
        "hami.io/node-handshake-BI-V150",
    )
    assert (w.use_uuid, w.nouse_uuid) == ("hami.io/use-BI-V150-uuid", "hami.io/no-use-BI-V150-uuid")


def test_decode() -> None:
    # HAMi's "exist device" registration.
    reg = "GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae,10,8192,100,MR-V100,0,true:"
    assert F.decode_node({REG_KEY: reg}) == (
        DeviceInfo("GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae", 0, 10, 8192, 100, "MR-V100"),
    )
    nine = "a,10,8192,100,MR-V100,0,true,3,hami-core:"
    infos = F.decode_node({REG_KEY: nine})
    assert infos is not None and infos[0].index == 3
    assert F.decode_node({"hami.io/node-MR-V50-register": reg}) is None  # another chip's
    for bad in ("[]", "a,10,8192,100,MR-V100,0,true", "a,10,8192,100,MR-V100,0,true,1:"):
        with pytest.raises(CodecError):  # DecodeNodeDevices: the `:` form, 7 or 9 fields
            F.decode_node({REG_KEY: bad})


@pytest.mark.parametrize(
    ("limits", "want"),
    [  # HAMi's TestGenerateResourceRequests, and the lenient core value
        ({GPU: 1, MEM: 1000, CORES: 100}, (1, 256000, 101, 100)),
        ({GPU: 1}, (1, 0, 100, 0)),
        ({}, None),
        ({GPU: 1, MEM: "16Gi"}, None),  # overflows int32 MiB
        ({GPU: 1, CORES: "0.5"}, (1, 0, 100, 0)),  # AsInt64 fails: the default stands
        ({GPU: 2, MEM: 4, CORES: 30}, (2, 1024, 101, 30)),  # per device, not split
    ],
)
def test_requests(limits: dict[str, object], want: Ask) -> None:
    assert asked(F, limits) == want


def test_strict_overflow() -> None:
    with pytest.raises(RequestError):
        F.container_request(ctr({GPU: 1, MEM: "16Gi"}), strict=True)


STEPS = [
    Step("HAMi: fit success", [gpu("dev-0"), gpu("dev-1")], req(1, 64, 50), (("dev-1", 64, 50),)),
    Step("HAMi: memory not enough", [gpu("d")], req(1, 512, 50), "1/1 CardInsufficientMemory"),
    Step(
        "HAMi: core not enough",
        [gpu("d", usedcores=100)],
        req(1, 64, 50),
        "1/1 CardInsufficientCore",
    ),
    Step(
        "HAMi: mutex rejects a used card",
        [gpu("d", used=1)],
        req(1, 64, 50),
        "1/1 ExclusiveDeviceAllocateConflict",
        mutex=True,
    ),
    Step(
        "count alone takes the whole memory",
        [gpu("a"), gpu("b", usedmem=1)],
        {GPU: 1},
        (("a", 128, 0),),
    ),
    Step(
        "vMem units of 256 MiB",
        [gpu("a", mem=1024)],
        {GPU: 1, MEM: 2, CORES: 10},
        (("a", 512, 10),),
    ),
    Step(
        "two devices",
        [gpu("a"), gpu("b")],
        {GPU: 2, MEM: 0, CORES: 100},
        (("b", 128, 100), ("a", 128, 100)),
    ),
    Step("over 100 cores is taken as 100", [gpu("a")], req(1, 1, 250), (("a", 1, 100),)),
    Step(
        "100 cores want the card alone",
        [gpu("a", used=1, usedmem=1)],
        req(1, 1, 100),
        "1/1 ExclusiveDeviceAllocateConflict",
    ),
    Step(
        "no cores left for a core-less task",
        [gpu("a", used=1, usedcores=100)],
        req(1, 1, 0),
        "1/1 CardComputeUnitsExhausted",
    ),
    Step(
        "uuid",
        [gpu("a"), gpu("b")],
        req(1, 1),
        (("a", 1, 0),),
        annotations={"hami.io/use-MR-V100-uuid": "a"},
    ),
    Step(
        "nouse uuid",
        [gpu("a"), gpu("b")],
        req(1, 1),
        "2/2 CardUuidMismatch",
        annotations={"hami.io/no-use-MR-V100-uuid": "a, b"},
    ),
    Step(
        "another chip's uuid key is not read",
        [gpu("a")],
        req(1, 1),
        (("a", 1, 0),),
        annotations={"hami.io/use-MR-V50-uuid": "zzz"},
    ),
    Step(
        "too few",
        [gpu("a", usedmem=100), gpu("b")],
        req(2, 64),
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory",
    ),
    Step("split count", [gpu("a", used=100)], req(1, 1), "1/1 CardTimeSlicingExhausted"),
]


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_fit(step: Step) -> None:
    check(F, step)


def test_annotations() -> None:
    text = "a,MR-V100,64,50:;"
    assert F.annotations(((ContainerDevice("a", 64, 50, "MR-V100"),),)) == {
        "hami.io/MR-V100-devices-to-allocate": text,
        "hami.io/MR-V100-devices-allocated": text,
    }


def test_claim() -> None:
    one = F.claim(ctr({GPU: 1}, name="train"), {})
    assert one.claimed and one.limits == () and one.env == (("SOL_CONTINER_NAME", "train"),)
    two = F.claim(ctr({GPU: 2, CORES: 10}, name="train"), {})
    assert two.limits == ((CORES, "200"),)  # HAMi overwrites the core limit
    named = ctr({GPU: 1}, name="train") | {"env": [{"name": "SOL_CONTINER_NAME", "value": "x"}]}
    assert F.claim(named, {}).env == ()
    assert F.claim(ctr({GPU: 1}, name=""), {}).env == ()
    assert not F.claim(ctr(None, {GPU: 1}), {}).claimed


def test_config() -> None:
    (f,) = iluvatar.from_config(
        [{"chipName": "X1", "commonWord": "Ilu-X1", "resourceCountName": "example.com/x1"}]
    )
    assert f.wire.type == "Ilu-X1" and f.wire.register_annotation == "hami.io/node-Ilu-X1-register"
    assert f.wire.resources.count == "example.com/x1" and f.wire.resources.memory == ""


def test_sample_registration_decodes() -> None:
    from tests.families_samples import SAMPLE_ALLOCATABLE, SAMPLE_NODE

    infos = F.decode_node(SAMPLE_NODE["MR-V100"])
    assert infos is not None and len(infos) == 2
    assert sum(d.count for d in infos) == int(SAMPLE_ALLOCATABLE["MR-V100"][GPU])
