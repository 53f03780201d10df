"""Moore Threads behind the seam: steps from HAMi v2.10's pkg/device/mthreads (device.go, tests)."""

import pytest

from hami.engine.families import mthreads
from hami.engine.families.base import BindContext, Claim, FamilyRequest, NodeFacts
from hami.engine.model import Card, ContainerDevice, DeviceInfo
from tests.unit.engine.families.kit import Ask, Step, asked, card, check, ctr

F = mthreads.FAMILY
GPU, MEM, CORES = "mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core"


def gpu(uuid: str, mem: int = 49152, **use: int | bool) -> Card:
    return card(DeviceInfo(uuid, 0, 100, mem, 16, "Mthreads"), **use)  # type: ignore[arg-type]


def dev(uuid: str) -> ContainerDevice:
    return ContainerDevice(uuid, 1024, 2, "Mthreads")


def test_cards_from_capacity() -> None:
    # HAMi's Test_GetNodeDevices.
    assert F.decode_node({}, NodeFacts("test", {MEM: "1", CORES: "1"})) == (
        DeviceInfo("test-mthreads-0", 0, 100, 8192, 16, "Mthreads"),
    )
    infos = F.decode_node({}, NodeFacts("n", {MEM: "192", CORES: "32"}))
    assert infos is not None and [(d.id, d.devmem) for d in infos] == [
        ("n-mthreads-0", 49152),
        ("n-mthreads-1", 49152),
    ]
    assert F.decode_node({}, NodeFacts("n", {MEM: "192"})) is None
    assert F.decode_node({}) is None


@pytest.mark.parametrize(
    ("limits", "requests", "want"),
    [  # HAMi's Test_GenerateResourceRequests
        ({GPU: 1, MEM: 1000, CORES: 1}, None, (1, 512000, 101, 1)),
        ({MEM: 1000, CORES: 1}, None, None),
        (None, {GPU: 1}, (1, 0, 100, 0)),
        ({GPU: 0, MEM: 1000, CORES: 1}, None, None),
        ({GPU: -1, MEM: 1000, CORES: 1}, None, None),
        # memory and cores are the container's, split over its devices
        ({GPU: 2, MEM: 192, CORES: 32}, None, (2, 49152, 101, 16)),
        ({GPU: 3, MEM: 4, CORES: 5}, None, (3, 682, 101, 1)),
        ({GPU: 1, CORES: "0.5"}, None, (1, 0, 100, 0)),
    ],
)
def test_requests(
    limits: dict[str, object] | None, requests: dict[str, object] | None, want: Ask
) -> None:
    assert asked(F, limits, requests) == want


def req(nums: int, mem: int, cores: int) -> FamilyRequest:
    return FamilyRequest("Mthreads", nums, mem, 101, cores)


STEPS = [
    Step(
        "one device from the tail",
        [gpu("a"), gpu("b")],
        {GPU: 1, MEM: 8, CORES: 4},
        (("b", 4096, 4),),
    ),
    Step("count alone takes the card's memory", [gpu("a")], {GPU: 1}, (("a", 49152, 0),)),
    Step(
        "whole cards",
        [gpu("a"), gpu("b")],
        {GPU: 2, MEM: 192, CORES: 32},
        (("b", 49152, 16), ("a", 49152, 16)),
    ),
    Step(
        "memory short",
        [gpu("a", usedmem=49000)],
        {GPU: 1, MEM: 2, CORES: 1},
        "1/1 CardInsufficientMemory",
    ),
    Step(
        "cores short",
        [gpu("a", used=1, usedcores=12)],
        {GPU: 1, MEM: 2, CORES: 8},
        "1/1 CardInsufficientCore",
    ),
    Step(
        "no exclusive rule: cards have 16 cores",
        [gpu("a", used=1)],
        req(1, 1024, 100),
        "1/1 CardInsufficientCore",
    ),
    Step(
        "a full card refuses a core-less task",
        [gpu("a", used=2, usedcores=16)],
        {GPU: 1, MEM: 2},
        "1/1 CardComputeUnitsExhausted",
    ),
    Step("split count", [gpu("a", used=100)], {GPU: 1, MEM: 2}, "1/1 CardTimeSlicingExhausted"),
    Step(
        "mutex",
        [gpu("a"), gpu("b", used=1)],
        {GPU: 1, MEM: 2, CORES: 1},
        (("a", 1024, 1),),
        mutex=True,
    ),
    Step(
        "uuid (mthreads.ai keys)",
        [gpu("a"), gpu("b")],
        {GPU: 1, MEM: 2, CORES: 1},
        (("a", 1024, 1),),
        annotations={"mthreads.ai/use-gpuuuid": "a"},
    ),
    Step(
        "nouse uuid",
        [gpu("a")],
        {GPU: 1, MEM: 2, CORES: 1},
        "1/1 CardUuidMismatch",
        annotations={"mthreads.ai/nouse-gpuuuid": "a"},
    ),
    Step(
        "HAMi: the pod's earlier devices fix the card",
        [gpu("a"), gpu("b")],
        {GPU: 1, MEM: 2, CORES: 1},
        (("a", 1024, 1),),
        allocated=((dev("a"),),),
    ),
    Step(
        "HAMi: another card is refused",
        [gpu("a"), gpu("b")],
        {GPU: 1, MEM: 2, CORES: 1},
        "2/2 CardNotFoundCustomFilterRule",
        allocated=((dev("c"),),),
    ),
    Step(
        "after the common checks",
        [gpu("a", used=100), gpu("b")],
        {GPU: 1, MEM: 2, CORES: 1},
        "1/2 CardNotFoundCustomFilterRule, 1/2 CardTimeSlicingExhausted",
        allocated=((dev("a"),),),
    ),
    Step("unhealthy", [gpu("a", healthy=False)], {GPU: 1}, "1/1 CardNotHealth"),
]


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_fit(step: Step) -> None:
    check(F, step)


def test_annotations() -> None:
    # HAMi's Test_PatchAnnotations: only the allocated key, the card indexes, the node.
    one = ContainerDevice("n-mthreads-0", 1000, 1, "Mthreads")
    assert F.annotations(((one,),), BindContext("n", 1733000000000000000)) == {
        "hami.io/mthreads-vgpu-devices-allocated": "n-mthreads-0,Mthreads,1000,1:;",
        "mthreads.com/gpu-index": "0",
        "mthreads.com/predicate-node": "n",
        "mthreads.com/predicate-time": "1733000000000000000",
    }
    two = (ContainerDevice("n-mthreads-3", 1, 1, "Mthreads"), one)
    got = F.annotations(((one,), (), two), BindContext("n", 5))
    assert got["mthreads.com/gpu-index"] == "3,0"  # the last container's devices
    assert F.annotations(((),)) == {}


WHOLE_2 = ((CORES, "32"), (MEM, "192"))
INVALID = "sGPU memory request value is invalid, valid values are [2, 4, 8, 16, 32, 64, 96]"


@pytest.mark.parametrize(
    ("limits", "requests", "want"),
    [  # HAMi's Test_MutateAdmission
        ({GPU: 1, MEM: 2, CORES: 1}, None, Claim(True)),
        (
            {GPU: 2},
            None,
            Claim(True, limits=WHOLE_2, annotations=(("mthreads.com/request-gpu-num", "2"),)),
        ),
        (
            None,
            {GPU: 2},
            Claim(True, limits=WHOLE_2, annotations=(("mthreads.com/request-gpu-num", "2"),)),
        ),
        (None, {GPU: 1}, Claim(True, limits=((CORES, "16"), (MEM, "96")))),
        ({MEM: 2}, None, Claim(False)),
        ({GPU: 1, MEM: 3}, None, Claim(True, error=INVALID)),
        ({GPU: 0}, None, Claim(False, error="mthreads.com/vgpu must be greater than 0")),
        ({GPU: -1}, None, Claim(False, error="mthreads.com/vgpu must be greater than 0")),
        (None, {GPU: 0}, Claim(False, error="mthreads.com/vgpu must be greater than 0")),
    ],
)
def test_claim(
    limits: dict[str, object] | None, requests: dict[str, object] | None, want: Claim
) -> None:
    assert F.claim(ctr(limits, requests), {}) == want


def test_no_lock_no_handshake() -> None:
    assert (F.wire.lock_name, F.wire.handshake_annotation, F.wire.register_annotation) == (
        "",
        "",
        "",
    )


def test_sample_registration_decodes() -> None:
    from tests.families_samples import SAMPLE_ALLOCATABLE, SAMPLE_NODE

    infos = F.decode_node(SAMPLE_NODE["Mthreads"], NodeFacts("n", SAMPLE_ALLOCATABLE["Mthreads"]))
    assert infos is not None and len(infos) == 2
