"""AMD behind the seam: steps from HAMi v2.10's pkg/device/amd (device.go and its tests)."""

from typing import Any

import pytest

from hami.engine.codec import CodecError
from hami.engine.families import amd
from hami.engine.families.base import FamilyRequest, FitPod, NodeFacts
from hami.engine.model import Card, ContainerDevice, DeviceInfo
from hami.engine.requests import RequestError
from tests.unit.engine.families.kit import Ask, Step, asked, card, check, ctr

F = amd.FAMILY
GPU, MEM, CORES = "amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores"
REG_KEY = "hami.io/node-amd-register"
# HAMi's Test_GetNodeDevices registration.
REG = '[{"id":"GPU-0","index":0,"count":1,"devmem":8192,"devcore":100,"type":"amd","numa":0,"health":true}]'


def gpu(
    uuid: str, count: int = 2, mem: int = 1000, cu: int = 100, model: str = "AMD", **use: Any
) -> Card:
    return card(DeviceInfo(uuid, 0, count, mem, cu, model), **use)


def req(nums: int, mem: int = 0, cores: int = 0) -> FamilyRequest:
    return FamilyRequest("AMD", nums, mem, 0, cores)


def test_decode_and_health() -> None:
    assert F.decode_node({REG_KEY: REG}) == (DeviceInfo("GPU-0", 0, 1, 8192, 100, "amd"),)
    assert F.decode_node({}) is None
    with pytest.raises(CodecError):
        F.decode_node({REG_KEY: "GPU-0,1,8192,100,amd,0,true:"})
    # HAMi's CheckHealth: the node must report the count resource.
    assert F.decode_node({REG_KEY: REG}, NodeFacts("n", {GPU: "1"})) is not None
    assert F.decode_node({REG_KEY: REG}, NodeFacts("n", {GPU: "0"})) == ()
    assert F.decode_node({REG_KEY: REG}, NodeFacts("n", {})) == ()


@pytest.mark.parametrize(
    ("limits", "requests", "want"),
    [
        ({GPU: 1}, None, (1, 0, 101, 100)),  # no percentage: all CUs
        ({GPU: 2, MEM: 4096, CORES: 25}, None, (2, 4096, 101, 25)),
        (None, {GPU: 1}, None),  # HAMi reads AMD's limits alone
        ({GPU: 1}, {MEM: 10}, (1, 0, 101, 100)),
        ({GPU: 0}, None, None),  # HAMi's "rejects zero count"
        ({GPU: 1, MEM: -1}, None, None),  # "rejects negative memory"
        ({GPU: 1, MEM: 2**31}, None, None),  # "rejects overflowing memory"
        ({GPU: 1, CORES: 0}, None, None),  # "rejects zero core percentage"
        ({GPU: 1, CORES: 101}, None, None),  # "rejects excessive core percentage"
    ],
)
def test_requests(
    limits: dict[str, object] | None, requests: dict[str, object] | None, want: Ask
) -> None:
    assert asked(F, limits, requests) == want
    if want is None and limits and limits.get(GPU):
        with pytest.raises(RequestError):
            F.container_request(ctr(limits, requests), strict=True)


STEPS = [
    Step(  # HAMi: "allocate two whole cards"
        "two whole cards",
        [gpu("dev-0"), gpu("dev-1", count=12)],
        req(2),
        (("dev-1", 1000, 100), ("dev-0", 1000, 100)),
    ),
    Step(  # HAMi: "core percentage maps per device"
        "percentage of a card's CUs",
        [gpu("dev-0", cu=10), gpu("dev-1", count=12)],
        {GPU: 1, MEM: 500, CORES: 50},
        (("dev-1", 500, 50),),
    ),
    Step(
        "percentage of 64 CUs", [gpu("d", cu=64)], {GPU: 1, MEM: 100, CORES: 50}, (("d", 100, 32),)
    ),
    Step("at least one CU", [gpu("d", cu=64)], {GPU: 1, MEM: 100, CORES: 1}, (("d", 100, 1),)),
    Step("at most all CUs", [gpu("d", cu=64)], req(1, 100, 101), (("d", 100, 64),)),
    Step("count alone: whole card", [gpu("d", mem=8192, cu=304)], {GPU: 1}, (("d", 8192, 304),)),
    Step("memory alone: all CUs still", [gpu("d")], {GPU: 1, MEM: 100}, (("d", 100, 100),)),
    Step(
        "HAMi: insufficient memory",
        [gpu("d", usedmem=900)],
        {GPU: 1, MEM: 500, CORES: 10},
        "1/1 CardInsufficientMemory",
    ),
    Step(
        "HAMi: insufficient core",
        [gpu("d", cu=10, usedcores=9)],
        {GPU: 1, MEM: 100},
        "1/1 CardInsufficientCore",
    ),
    Step(
        "no CUs registered",
        [gpu("d", cu=0)],
        {GPU: 1, MEM: 100, CORES: 10},
        "1/1 CardInsufficientCore",
    ),
    Step(
        "a partly used card takes a share",
        [gpu("d", used=1, usedmem=500, usedcores=50)],
        {GPU: 1, MEM: 500, CORES: 50},
        (("d", 500, 50),),
    ),
    Step(
        "no exclusive rule for 100%",
        [gpu("d", used=1, usedmem=10)],
        {GPU: 1, MEM: 10},
        (("d", 10, 100),),
    ),
    Step(
        "HAMi: uuid mismatch",
        [gpu("dev-1")],
        {GPU: 1, MEM: 100, CORES: 10},
        "1/1 CardUuidMismatch",
        annotations={"amd.com/use-gpu-uuid": "dev-0"},
    ),
    Step(
        "HAMi: time slicing exhausted",
        [gpu("d", used=2)],
        {GPU: 1, MEM: 100, CORES: 10},
        "1/1 CardTimeSlicingExhausted",
    ),
    Step(
        "HAMi: unhealthy",
        [gpu("d", healthy=False)],
        {GPU: 1, MEM: 100, CORES: 10},
        "1/1 CardNotHealth",
    ),
    Step(
        "mutex",
        [gpu("a"), gpu("b", used=1, usedmem=1)],
        {GPU: 1, MEM: 1, CORES: 1},
        (("a", 1, 1),),
        mutex=True,
    ),
    Step(
        "use-gputype by substring, any case",
        [gpu("x", model="AMD-MI300X"), gpu("y", model="AMD-MI250")],
        {GPU: 1, MEM: 1, CORES: 1},
        (("x", 1, 1),),
        annotations={"amd.com/use-gputype": "mi300"},
    ),
    Step(
        "nouse-gputype",
        [gpu("x", model="AMD-MI300X")],
        {GPU: 1},
        "1/1 CardTypeMismatch",
        annotations={"amd.com/nouse-gputype": "MI300X"},
    ),
    Step(
        "two cards, one too full",
        [gpu("a"), gpu("b", usedmem=600)],
        {GPU: 2, MEM: 500},
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory",
    ),
]


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_fit(step: Step) -> None:
    check(F, step)


def test_allocation_names_the_model() -> None:
    # HAMi: "retains the registered product type in the allocation".
    got = F.fit([gpu("d", model="AMD_Instinct_MI300X_VF")], req(1, 100, 10), FitPod(), ())
    assert got.devices == (ContainerDevice("d", 100, 10, "AMD_Instinct_MI300X_VF"),)
    text = "d,AMD_Instinct_MI300X_VF,100,10:;"
    assert F.annotations((got.devices,)) == {
        "hami.io/amd-devices-to-allocate": text,
        "hami.io/amd-devices-allocated": text,
    }


@pytest.mark.parametrize(
    ("limits", "claimed", "error"),
    [  # HAMi's Test_MutateAdmission
        ({GPU: 1}, True, ""),
        ({MEM: 1024}, True, ""),
        ({CORES: 50}, True, ""),
        ({}, False, ""),
        ({GPU: 1, CORES: 0}, False, "must be an integer percentage between 1 and 100"),
        ({GPU: 1, CORES: 101}, False, "must be an integer percentage between 1 and 100"),
        ({GPU: 1, MEM: 1024}, True, ""),
    ],
)
def test_claim(limits: dict[str, object], claimed: bool, error: str) -> None:
    got = F.claim(ctr(limits), {})
    assert got.claimed == claimed
    assert error in got.error and bool(got.error) == bool(error)


def test_claim_requests_only_is_not_claimed() -> None:
    assert not F.claim(ctr(None, {GPU: 1}), {}).claimed


def test_config() -> None:
    f = amd.from_config({"resourceCountName": "amd.com/gpu"})  # HAMi's built-in default
    assert (f.wire.resources.memory, f.wire.resources.cores) == ("", "")
    got = f.container_request(ctr({GPU: 1, MEM: 5}))
    assert got is not None and got.memreq == 0


def test_sample_registration_decodes() -> None:
    from tests.families_samples import SAMPLE_ALLOCATABLE, SAMPLE_NODE

    infos = F.decode_node(SAMPLE_NODE["AMD"], NodeFacts("n", SAMPLE_ALLOCATABLE["AMD"]))
    assert infos is not None and len(infos) == 2
