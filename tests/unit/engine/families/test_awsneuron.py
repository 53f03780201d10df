"""AWS Neuron behind the seam: steps from HAMi v2.10's pkg/device/awsneuron (device.go, tests)."""

import pytest

from hami.engine.families import awsneuron
from hami.engine.families.awsneuron import core_usage, graph_select
from hami.engine.families.base import BindContext, Claim, FamilyRequest, FitPod, NodeFacts
from hami.engine.model import Card, ContainerDevice, DeviceInfo
from hami.engine.requests import RequestError
from tests.unit.engine.families.kit import Step, card, check, ctr

F = awsneuron.FAMILY
DEV, CORE = "aws.amazon.com/neuron", "aws.amazon.com/neuroncore"
KIND = "node.kubernetes.io/instance-type"


def neuron(
    i: int,
    kind: str = "trn1.32xlarge",
    used: int = 0,
    usedcores: int = 0,
    cores: int = 2,
    healthy: bool = True,
) -> Card:
    info = DeviceInfo(
        f"n-AWSNeuron-{i}", i, cores, 0, 2**cores - 1, "AWSNeuron", custom=(("AWSNodeType", kind),)
    )
    return card(info, used=used, usedcores=usedcores, healthy=healthy)


def node(n: int, kind: str = "trn1.32xlarge", **used: int) -> list[Card]:
    """n idle devices, those named `u<i>` used by one task."""
    return [neuron(i, kind, used=used.get(f"u{i}", 0)) for i in range(n)]


def test_devices_from_capacity() -> None:
    # HAMi's Test_GetNodeDevices.
    facts = NodeFacts("test", {DEV: "1", CORE: "2"}, {KIND: "inf2"})
    assert F.decode_node({}, facts) == (
        DeviceInfo("test-AWSNeuron-0", 0, 2, 0, 3, "AWSNeuron", custom=(("AWSNodeType", "inf2"),)),
    )
    trn2 = F.decode_node({}, NodeFacts("m", {DEV: "16", CORE: "128"}))
    assert trn2 is not None and len(trn2) == 16
    assert (trn2[5].id, trn2[5].count, trn2[5].devcore) == ("m-AWSNeuron-5", 8, 255)
    assert trn2[0].custom == (("AWSNodeType", ""),)  # no label: present and empty
    assert F.decode_node({}, NodeFacts("m", {CORE: "2"})) is None
    assert F.decode_node({}) is None


@pytest.mark.parametrize(
    ("limits", "requests", "want"),
    [  # HAMi's Test_GenerateResourceRequests
        ({DEV: 1}, {DEV: 1}, (1, 0, True)),
        ({CORE: 1}, {CORE: 1}, (1, 1, False)),
        ({CORE: 2}, None, (1, 2, False)),
        ({CORE: 4}, None, (2, 2, False)),
        (None, {CORE: 3}, None),  # odd core count over two
        ({CORE: 0}, None, None),
        ({CORE: -2}, None, None),
        ({DEV: "0.5"}, None, None),
        ({DEV: 2, CORE: 3}, None, (2, 0, True)),  # the count wins; cores are not read
    ],
)
def test_requests(
    limits: dict[str, object] | None,
    requests: dict[str, object] | None,
    want: tuple[object, ...] | None,
) -> None:
    got = F.container_request(ctr(limits, requests))
    if want is None:
        assert got is None
        with pytest.raises(RequestError):
            F.container_request(ctr(limits, requests), strict=True)
    else:
        assert got is not None
        assert (got.nums, got.coresreq, ("unit", "device") in got.extra) == want


@pytest.mark.parametrize(
    ("kind", "used", "count", "want"),
    [  # HAMi's Test_graphSelect
        ("inf2", (), 16, list(range(16))),
        ("trn", (7, 13), 8, []),
        ("trn", (7,), 8, list(range(8, 16))),
        ("inf", (5, 14), 8, list(range(6, 14))),
        ("trn", (), 2, []),  # two devices: not a run HAMi makes off Inferentia
        ("inf2", (), 2, [0, 1]),
    ],
)
def test_graph_select(kind: str, used: tuple[int, ...], count: int, want: list[int]) -> None:
    cards = [neuron(i, kind, used=1 if i in used else 0) for i in range(16)]
    assert graph_select(cards, count) == want


def test_core_usage() -> None:
    assert [core_usage(0, 1), core_usage(0, 2), core_usage(1, 1), core_usage(2, 1)] == [1, 3, 2, 1]
    assert core_usage(0, 8) == 3  # HAMi's two-core masks, kept


def whole(nums: int) -> FamilyRequest:
    return FamilyRequest("AWSNeuron", nums, 0, 101, 0, (("unit", "device"),))


STEPS = [
    Step("one device from the tail", node(2), {DEV: 1}, (("n-AWSNeuron-1", 0, 3),)),
    Step("one core: core 0", node(2), {CORE: 1}, (("n-AWSNeuron-1", 0, 1),)),
    Step(
        "one core beside another: core 1",
        [neuron(0), neuron(1, used=1, usedcores=1)],
        {CORE: 1},
        (("n-AWSNeuron-1", 0, 2),),
    ),
    Step(
        "two cores want a free device",
        [neuron(0), neuron(1, used=1, usedcores=1)],
        {CORE: 2},
        (("n-AWSNeuron-0", 0, 3),),
    ),
    Step(
        "HAMi: core not enough",
        [neuron(0, used=1, usedcores=3)],
        {CORE: 2},
        "1/1 CardInsufficientCore",
    ),
    Step(
        "a whole device needs all its cores",
        [neuron(0, used=1, usedcores=1)],
        {DEV: 1},
        "1/1 CardInsufficientCore",
    ),
    Step(
        "trn2: a whole device needs its 8 cores",
        [neuron(0, cores=8, used=1, usedcores=3)],
        whole(1),
        "1/1 CardInsufficientCore",
    ),
    Step(
        "HAMi: card overused",
        [neuron(0, used=2, usedcores=0)],
        {CORE: 1},
        "1/1 CardTimeSlicingExhausted",
    ),
    Step(
        "HAMi: mutex",
        [neuron(0, used=1, usedcores=1)],
        {CORE: 1},
        "1/1 ExclusiveDeviceAllocateConflict",
        mutex=True,
    ),
    Step(
        "HAMi: uuid mismatch",
        node(1),
        {CORE: 1},
        "1/1 CardUuidMismatch",
        annotations={"aws.amazon.com/use-neuron-uuid": "dev-0"},
    ),
    Step(
        "nouse uuid",
        node(2),
        {CORE: 1},
        (("n-AWSNeuron-0", 0, 1),),
        annotations={"aws.amazon.com/nouse-neuron-uuid": "n-AWSNeuron-1"},
    ),
    Step("unhealthy", [neuron(0, healthy=False)], {CORE: 1}, "1/1 CardNotHealth"),
    Step("HAMi: two devices off Inferentia", node(1), whole(2), "1/1 NumaNotFit"),
    Step(
        "four aligned trn devices",
        node(8, u1=1),
        {DEV: 4},
        tuple((f"n-AWSNeuron-{i}", 0, 3) for i in range(4, 8)),
    ),
    Step(
        "four cores are two devices in a run",
        node(8, kind="inf2", u0=1),
        {CORE: 4},
        (("n-AWSNeuron-1", 0, 3), ("n-AWSNeuron-2", 0, 3)),
    ),
    Step("no aligned run", node(8, u1=1, u5=1), {DEV: 4}, "1/8 NumaNotFit"),
    Step(
        "a run ignores uuid selection (HAMi)",
        node(4),
        {DEV: 4},
        tuple((f"n-AWSNeuron-{i}", 0, 3) for i in range(4)),
        annotations={"aws.amazon.com/use-neuron-uuid": "nothing"},
    ),
]


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_fit(step: Step) -> None:
    check(F, step)


def test_run_reads_positions_as_indexes() -> None:
    # HAMi maps the run's positions in the sorted list to device indexes.
    cards = [neuron(1), neuron(0), neuron(2), neuron(3)]
    got = F.fit(cards, whole(4), FitPod(), ())
    assert got.devices is not None
    assert [d.uuid for d in got.devices] == [f"n-AWSNeuron-{i}" for i in range(4)]


def dev(i: int, mask: int) -> ContainerDevice:
    return ContainerDevice(f"n-AWSNeuron-{i}", 0, mask, "AWSNeuron")


def test_annotations() -> None:
    # HAMi's Test_PatchAnnotations (device indexes; core indexes; an init container).
    bind = BindContext("n", 7, (ctr({DEV: 2}),))
    got = F.annotations(((dev(0, 3), dev(1, 3)),), bind)
    assert got == {
        "hami.io/aws-neuron-devices-allocated": "n-AWSNeuron-0,AWSNeuron,0,3:n-AWSNeuron-1,AWSNeuron,0,3:;",
        "AWS_NEURON_IDS": "0,1",
        "NEURON_ALLOC_TIME": "7",
        "NEURON_ALLOCATED": "false",
        "aws.amazon.com/predicate-node": "n",
    }
    cores = F.annotations(((dev(0, 3),),), BindContext("n", 7, (ctr({CORE: 2}),)))
    assert (cores["AWS_NEURON_IDS"], cores["NEURON_RESOURCE_TYPE"]) == ("0,1", CORE)
    init = F.annotations(((dev(0, 3),), ()), BindContext("n", 7, (ctr({DEV: 1}), ctr({}))))
    assert init["AWS_NEURON_IDS"] == "0"
    # Core indexes count the device's cores (from the node's cards) and HAMi's list
    # runs on across containers.
    cards = F.decode_node({}, NodeFacts("n", {DEV: "4", CORE: "16"}))  # 4 cores each
    assert cards is not None
    two = F.annotations(
        ((dev(3, 2),), (dev(1, 1),)),
        BindContext("n", 7, (ctr({CORE: 1}), ctr(None, {CORE: 1})), cards),
    )
    assert two["AWS_NEURON_IDS"] == "13,4"
    # A count in requests alone is written as cores (HAMi reads the limits).
    req_only = F.annotations(((dev(2, 3),),), BindContext("n", 7, (ctr(None, {DEV: 1}),)))
    assert req_only["AWS_NEURON_IDS"] == "4,5"


@pytest.mark.parametrize(
    ("limits", "requests", "want"),
    [  # HAMi's Test_MutateAdmission
        ({DEV: 1}, None, Claim(True)),
        (None, {DEV: 1}, Claim(True)),
        ({CORE: 2}, None, Claim(True)),
        ({CORE: 3}, None, Claim(False, error=f"{CORE} must be 1 or a multiple of 2, got 3")),
        ({DEV: 0}, None, Claim(False, error=f"{DEV} must be greater than 0")),
        ({DEV: "1.5"}, None, Claim(False, error=f"{DEV} must be an integer")),
        ({DEV: 2**31}, None, Claim(False, error=f"{DEV} must not exceed {2**31 - 1}")),
        ({}, None, Claim(False)),
    ],
)
def test_claim(
    limits: dict[str, object] | None, requests: dict[str, object] | None, want: Claim
) -> None:
    assert F.claim(ctr(limits, requests), {}) == want


def test_sample_registration_decodes() -> None:
    from tests.families_samples import SAMPLE_ALLOCATABLE, SAMPLE_LABELS, SAMPLE_NODE

    facts = NodeFacts("n", SAMPLE_ALLOCATABLE["AWSNeuron"], SAMPLE_LABELS["AWSNeuron"])
    infos = F.decode_node(SAMPLE_NODE["AWSNeuron"], facts)
    assert infos is not None and len(infos) == 16 and infos[0].devcore == 3
    assert infos[0].custom_value("AWSNodeType") == "trn1.32xlarge"
