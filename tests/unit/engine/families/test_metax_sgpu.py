"""The MetaX sGPU family (HAMi v2.10 pkg/device/metax/sdevice.go): shared cards with QoS
policies, online/offline app classes and MetaLink-aware whole cards.

Expected values marked "HAMi:" are from HAMi's own sdevice_test.go."""

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.engine.codec import CodecError
from hami.engine.families.base import (
    BindContext,
    Claim,
    FamilyRequest,
    FitPod,
    NodeFacts,
    node_score,
)
from hami.engine.families.metax import MetaxConfig, MetaxSgpu
from hami.engine.families.metax.registration import custom, zone_of
from hami.engine.families.metax.sgpu import from_config as sgpu_from_config
from hami.engine.model import Card, ContainerDevice, DeviceInfo, PodDevices
from hami.engine.policy import CardFilter, NodePolicy
from hami.engine.requests import LimitError, RequestError
from tests.unit.engine.families.metax_cards import card, container, sgpu

SGPU = MetaxSgpu()
AWARE = MetaxSgpu(MetaxConfig(topology_aware=True))
QOS = "metax-tech.com/sgpu-qos-policy"
CLASS = "metax-tech.com/sgpu-app-class"
ALLOCATED = "hami.io/metax-sgpu-devices-allocated"

BINPACK, SPREAD = NodePolicy.BINPACK, NodePolicy.SPREAD


def ask(nums: int = 1, mem: int = 64, cores: int = 50, pct: int = 0) -> FamilyRequest:
    return FamilyRequest("Metax-SGPU", nums, mem, pct, cores)


def fit_ids(
    cards: Sequence[Card],
    request: FamilyRequest,
    annotations: Mapping[str, str] | None = None,
    holders: Mapping[str, tuple[Mapping[str, str], ...]] | None = None,
    allocated: PodDevices = (),
) -> tuple[list[str] | None, str]:
    pod = FitPod(annotations or {}, holders=holders or {})
    fit = SGPU.fit(cards, request, pod, allocated)
    ids = None if fit.devices is None else [d.uuid for d in fit.devices]
    return ids, fit.reason


# --- registration -------------------------------------------------------------------------


def test_registration_as_the_device_plugin_writes_it() -> None:
    # HAMi: TestGetMetaxSDevices and TestConvertMetaxSDeviceToHAMIDevice.
    value = (
        '[{"uuid": "GPU-123", "model": "sgpu", "totalDevCount": 16, "totalCompute": 100,'
        ' "bdf": "0000:44:00.0", "totalVRam" : 32768, "numa": 1, "healthy": true,'
        ' "qosPolicy": "fixed-share"},'
        ' {"UUID": "GPU-456", "TOTALVRAM": 65536, "linkZone": 2}]'
    )
    assert SGPU.decode_node({"metax-tech.com/node-gpu-devices": value}) == (
        DeviceInfo(
            "GPU-123",
            0,
            16,
            32768,
            100,
            "Metax-SGPU",
            1,
            "",
            True,
            (),
            custom("fixed-share", 0, "sgpu"),
        ),
        DeviceInfo("GPU-456", 1, 0, 65536, 0, "Metax-SGPU", 0, "", False, (), custom(zone=2)),
    )


@pytest.mark.parametrize("value", [None, "[]", "null"])
def test_no_cards_is_no_registration(value: str | None) -> None:
    annotations = {} if value is None else {"metax-tech.com/node-gpu-devices": value}
    assert SGPU.decode_node(annotations) is None


@pytest.mark.parametrize(
    "value",
    [
        "",  # HAMi: "test Unmarshal fail"
        "{}",
        "[null]",
        '[{"uuid": "a", "totalVRam": "64"}]',
        '[{"uuid": "a", "totalVRam": 1.5}]',
        '[{"uuid": "a", "totalVRam": 2147483648}]',
        '[{"uuid": "a", "healthy": "yes"}]',
        '[{"uuid": 7}]',
    ],
)
def test_unreadable_registration(value: str) -> None:
    with pytest.raises(CodecError):
        SGPU.decode_node({"metax-tech.com/node-gpu-devices": value})


# --- requests -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "want"),
    [
        # HAMi: TestGenerateResourceRequests
        ({"metax-tech.com/sgpu": "1"}, ask(1, 0, 100, 100)),
        ({"metax-tech.com/sgpu": "2"}, ask(2, 0, 100, 100)),
        ({"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "30"}, ask(1, 0, 30, 100)),
        ({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "16"}, ask(1, 16384, 100)),
        (
            {
                "metax-tech.com/sgpu": "1",
                "metax-tech.com/vcore": "60",
                "metax-tech.com/vmemory": "16",
            },
            ask(1, 16384, 60),
        ),
        ({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "1024Mi"}, ask(1, 1024, 100)),
        ({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "16Gi"}, ask(1, 16384, 100)),
        ({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "2100001"}, None),
        ({"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "2200000000"}, None),
        # Beyond HAMi's own tests: a bare value is GiB, one that prints with a unit is bytes;
        # 2000 prints as 2k (HAMi's bug, kept: 0 MiB, so the whole card).
        ({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "2000"}, ask(1, 0, 100, 100)),
        ({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "1500"}, ask(1, 1536000, 100)),
        ({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "1025Ki"}, ask(1, 1, 100)),
        # Go prints 1.5Ki as 1536 and 0.5Ki as 512: no unit, so GiB.
        ({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "1.5Ki"}, ask(1, 1572864, 100)),
        ({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "0.5Ki"}, ask(1, 524288, 100)),
        ({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "3G"}, ask(1, 2861, 100)),
        ({"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "0.5"}, ask(1, 0, 100, 100)),
        ({"metax-tech.com/sgpu": "0"}, None),
        ({"metax-tech.com/sgpu": "1.5"}, None),
    ],
)
def test_request(limits: dict[str, str], want: FamilyRequest | None) -> None:
    assert SGPU.container_request(container(limits)) == want


def test_only_limits_are_read() -> None:
    assert SGPU.container_request(container(requests={"metax-tech.com/sgpu": "1"})) is None


@pytest.mark.parametrize(
    "limits",
    [
        {"metax-tech.com/sgpu": "1.5"},
        {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "0.5"},
        {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "0.5"},
        {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "lots"},
    ],
)
def test_strict_names_what_hami_ignores(limits: dict[str, str]) -> None:
    with pytest.raises(RequestError, match="container c"):
        SGPU.container_request(container(limits), strict=True)


def test_too_many_cards_is_refused_even_lenient() -> None:
    with pytest.raises(LimitError):
        SGPU.container_request(container({"metax-tech.com/sgpu": "2200000000"}))


# --- fit: HAMi's checks and reasons -------------------------------------------------------


def one(**kw: object) -> list[Card]:
    usage = {k: kw.pop(k) for k in ("used", "usedmem", "usedcores") if k in kw}
    return [card(sgpu("dev-0", **kw), **usage)]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cards", "request_", "annotations", "holders", "want", "reason"),
    [
        # HAMi: TestMetaxSDevices_Fit
        ([card(sgpu("dev-0")), card(sgpu("dev-1"))], ask(), {}, {}, ["dev-1"], ""),
        (one(), ask(mem=512), {}, {}, None, "1/1 CardInsufficientMemory"),
        (one(used=1, usedmem=100), ask(), {}, {}, None, "1/1 CardInsufficientMemory"),
        (one(mem=1024, usedcores=100), ask(mem=512), {}, {}, None, "1/1 CardInsufficientCore"),
        (one(), FamilyRequest("OtherType", 1, 512, 0, 50), {}, {}, None, "1/1 CardTypeMismatch"),
        (
            one(used=1, usedmem=64, usedcores=10),
            ask(mem=512),
            {CLASS: "online"},
            {"dev-0": ({},)},
            None,
            "1/1 CardAppClassMismatch",
        ),
        (
            one(used=1, usedmem=64, usedcores=10),
            ask(mem=512),
            {},
            {"dev-0": ({CLASS: "online"},)},
            None,
            "1/1 CardAppClassMismatch",
        ),
        (one(healthy=False), ask(mem=512), {}, {}, None, "1/1 CardUnhealthy"),
        (one(mem=1280, used=100), ask(mem=512), {}, {}, None, "1/1 CardTimeSlicingExhausted"),
        (one(mem=1280), ask(mem=512, cores=120), {}, {}, None, "1/1 CardInsufficientCore"),
        (
            one(mem=1280, used=20),
            ask(mem=512, cores=100),
            {},
            {},
            None,
            "1/1 ExclusiveDeviceAllocateConflict",
        ),
        (
            [card(sgpu("dev-1", mem=1280))],
            ask(2, 512),
            {"metax-tech.com/use-gpuuuid": "dev-0"},
            {},
            None,
            "1/1 CardUuidMismatch",
        ),
        (
            one(mem=1280),
            ask(2, 512),
            {"metax-tech.com/nouse-gpuuuid": "dev-0"},
            {},
            None,
            "1/1 CardUuidMismatch",
        ),
        (
            one(mem=1280, used=20, usedcores=100),
            ask(mem=512, cores=0),
            {},
            {},
            None,
            "1/1 CardComputeUnitsExhausted",
        ),
        (
            one(mem=1280, used=20, usedcores=10),
            ask(2, 512, 20),
            {},
            {},
            None,
            "1/1 AllocatedCardsInsufficientRequest",
        ),
        (one(mem=1280, used=20, usedcores=10), ask(1, 0, 20, 10), {}, {}, ["dev-0"], ""),
        (
            one(used=1),
            ask(),
            {"hami.io/gpu-scheduler-policy": "mutex"},
            {},
            None,
            "1/1 ExclusiveDeviceAllocateConflict",
        ),
        # Reasons add up across cards, HAMi's GenReason.
        (
            [card(sgpu("a", healthy=False)), card(sgpu("b", mem=32)), card(sgpu("c"))],
            ask(2),
            {},
            {},
            None,
            "1/3 AllocatedCardsInsufficientRequest, 1/3 CardInsufficientMemory, 1/3 CardUnhealthy",
        ),
    ],
)
def test_fit(
    cards: list[Card],
    request_: FamilyRequest,
    annotations: dict[str, str],
    holders: dict[str, tuple[dict[str, str], ...]],
    want: list[str] | None,
    reason: str,
) -> None:
    pod = FitPod(
        annotations,
        frozenset({CardFilter.MUTEX} if "mutex" in annotations.values() else ()),
        holders=holders,
    )
    fit = SGPU.fit(cards, request_, pod, ())
    assert (None if fit.devices is None else [d.uuid for d in fit.devices]) == want
    assert fit.reason == reason


def test_fit_takes_memory_and_cores_per_card() -> None:
    cards = [card(sgpu("a", mem=1000)), card(sgpu("b", mem=2000))]
    fit = SGPU.fit(cards, ask(2, 0, 30, 100), FitPod(), ())
    assert fit.devices == (
        ContainerDevice("b", 2000, 30, "Metax-SGPU"),
        ContainerDevice("a", 1000, 30, "Metax-SGPU"),
    )


# --- QoS policies -------------------------------------------------------------------------


def shared(qos: str = "best-effort", used: int = 1, uuid: str = "dev-0") -> Card:
    return card(sgpu(uuid, mem=1024, qos=qos), used=used, usedmem=64 * used, usedcores=10 * used)


@pytest.mark.parametrize(
    ("registered", "used", "wanted", "cores", "fits"),
    [
        # HAMi: TestCheckDeviceQos
        ("best-effort", 0, "fixed-share", 50, True),  # an unused card takes any policy
        ("best-effort", 1, "fixed-share", 100, False),  # whole card: policy not checked
        ("best-effort", 1, "fixed-share", 50, False),
        ("best-effort", 1, "best-effort", 50, True),
        ("", 1, "burst-share", 50, True),  # a card with no policy takes any
        ("burst-share", 1, "", 50, False),  # a pod the webhook did not see asks for none
    ],
)
def test_qos_policy(registered: str, used: int, wanted: str, cores: int, fits: bool) -> None:
    annotations = {QOS: wanted} if wanted else {}
    ids, reason = fit_ids([shared(registered, used)], ask(cores=cores), annotations)
    assert (ids is not None) == fits
    if not fits:
        want = "CardInsufficientCore" if cores == 100 else "CardQosPolicyMismatch"
        assert reason == f"1/1 {want}"


def holder(qos: str, cores: int = 10, uuid: str = "dev-0") -> dict[str, str]:
    return {QOS: qos, ALLOCATED: f"{uuid},Metax-SGPU,64,{cores}:;"}


@pytest.mark.parametrize(
    ("registered", "holders", "wanted", "fits"),
    [
        # The plugin still reports best-effort; the pod bound there asked for fixed-share.
        ("best-effort", (holder("fixed-share"),), "best-effort", False),
        ("best-effort", (holder("fixed-share"),), "fixed-share", True),
        # Once the plugin reports it, the registration says it.
        ("fixed-share", (holder("fixed-share"),), "fixed-share", True),
        # A pod holding the card whole leaves it with no policy.
        ("best-effort", (holder("fixed-share", cores=100),), "burst-share", True),
        # An online holder does not set the policy.
        ("best-effort", ({**holder("fixed-share"), CLASS: "online"},), "best-effort", False),
    ],
)
def test_qos_policy_set_by_the_pods_holding_the_card(
    registered: str, holders: tuple[dict[str, str], ...], wanted: str, fits: bool
) -> None:
    # HAMi keeps what a bind set in its JitteryQosCache until the plugin reports it.
    ids, reason = fit_ids([shared(registered)], ask(), {QOS: wanted}, {"dev-0": holders})
    assert (ids == ["dev-0"]) == fits, reason


def test_an_earlier_container_of_the_pod_sets_the_cards_policy() -> None:
    # HAMi's AddResourceUsage: the card runs under the pod's policy once it took it.
    mine = ((ContainerDevice("dev-0", 64, 10, "Metax-SGPU"),),)
    card_ = shared("burst-share", used=2)
    assert fit_ids([card_], ask(), {QOS: "fixed-share"})[0] is None
    assert fit_ids([card_], ask(), {QOS: "fixed-share"}, allocated=mine)[0] == ["dev-0"]


# --- app classes --------------------------------------------------------------------------

ON = {CLASS: "online"}
OFF = {CLASS: "offline"}


@pytest.mark.parametrize(
    ("wanted", "used", "holders", "fits"),
    [
        # HAMi: TestCheckAppClass
        ("online", 0, (), True),
        ("", 1, (ON,), False),
        ("", 1, (OFF,), False),
        ("", 1, ({},), True),
        ("online", 1, ({},), False),
        ("online", 2, (ON, OFF), True),
        ("offline", 2, (ON, OFF), False),
    ],
)
def test_app_class(wanted: str, used: int, holders: tuple[dict[str, str], ...], fits: bool) -> None:
    annotations = {CLASS: wanted} if wanted else {}
    ids, reason = fit_ids([shared("", used)], ask(), annotations, {"dev-0": holders})
    assert (ids is not None) == fits
    assert fits or reason == "1/1 CardAppClassMismatch"


@pytest.mark.parametrize(
    ("holders", "want"),
    [
        # HAMi: TestPrioritizeOnlineDevices (candidates in HAMi's order, one card asked)
        ([(), (ON,), (ON, ON), (ON, OFF), (ON, ON, OFF), (OFF,), (OFF, OFF)], "GPU-1"),
        ([(ON,), (ON, ON), (ON, ON, ON, OFF), (OFF, OFF)], "GPU-1"),
        ([(ON, ON, ON), (ON, OFF), (ON, ON, OFF), (OFF,), (OFF, OFF)], "GPU-2"),
        ([(OFF,), (OFF, OFF)], "GPU-1"),
    ],
)
def test_online_pod_takes_the_card_with_fewest_online_pods(
    holders: list[tuple[dict[str, str], ...]], want: str
) -> None:
    ids = [f"GPU-{i + 1}" for i in range(len(holders))]
    # Cards are walked from the tail, so HAMi's candidate order is the reverse.
    cards = [
        shared("", len(h) or 0, uuid) for uuid, h in reversed(list(zip(ids, holders, strict=True)))
    ]
    annotations = {CLASS: "online"}
    fit = SGPU.fit(
        cards, ask(), FitPod(annotations, holders=dict(zip(ids, holders, strict=True))), ()
    )
    assert fit.devices is not None
    # An online pod takes no cores: it outranks whatever runs there.
    assert [(d.uuid, d.usedcores) for d in fit.devices] == [(want, 0)]


def test_online_pod_skips_the_compute_checks() -> None:
    full = card(sgpu("dev-0", mem=1024), used=1, usedmem=64, usedcores=100)
    holders = {"dev-0": (ON,)}
    assert fit_ids([full], ask(cores=50), {CLASS: "online"}, holders)[0] == ["dev-0"]
    assert fit_ids([full], ask(cores=50), {CLASS: "offline"}, holders)[0] is None


# --- whole cards by MetaLink --------------------------------------------------------------


@pytest.mark.parametrize(
    ("zones", "need", "want"),
    [
        # HAMi: TestPrioritizeExclusiveDevices (candidate order, zone per card)
        ([("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2)], 1, ["GPU-5"]),
        (
            [("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2), ("GPU-6", 2), ("GPU-7", 2)],
            2,
            ["GPU-1", "GPU-2"],
        ),
        (
            [("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2), ("GPU-6", 2), ("GPU-7", 2), ("GPU-8", 2)],
            4,
            ["GPU-5", "GPU-6", "GPU-7", "GPU-8"],
        ),
        (
            [("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2), ("GPU-6", 2), ("GPU-7", 2)],
            4,
            ["GPU-1", "GPU-2", "GPU-5", "GPU-6"],
        ),
        ([("GPU-5", 0), ("GPU-6", 0), ("GPU-7", 0)], 2, ["GPU-5", "GPU-6"]),
        ([("GPU-3", 0), ("GPU-4", 0), ("GPU-7", 1), ("GPU-8", 1)], 2, ["GPU-7", "GPU-8"]),
        (
            [("GPU-3", 0), ("GPU-4", 0), ("GPU-6", 1), ("GPU-7", 1), ("GPU-8", 1)],
            4,
            ["GPU-6", "GPU-7", "GPU-8", "GPU-3"],
        ),
        # Zones of one size: the one met first in walk order (HAMi: random).
        ([("GPU-1", 2), ("GPU-2", 1), ("GPU-3", 1), ("GPU-4", 2)], 2, ["GPU-1", "GPU-4"]),
    ],
)
def test_whole_cards_are_taken_within_one_metalink(
    zones: list[tuple[str, int]], need: int, want: list[str]
) -> None:
    cards = [card(sgpu(uuid, zone=zone)) for uuid, zone in reversed(zones)]
    assert fit_ids(cards, ask(need, 0, 100, 100))[0] == want
    # Only a whole-card ask is placed by links; a shared one takes the walk order.
    assert fit_ids(cards, ask(need, 0, 99, 100))[0] == [u for u, _ in zones[:need]]


# --- score --------------------------------------------------------------------------------


def taken(*uuids: str, cores: int = 100) -> PodDevices:
    return (tuple(ContainerDevice(u, 0, cores, "Metax-SGPU") for u in uuids),)


@pytest.mark.parametrize(
    ("chosen", "before", "want"),
    [
        # HAMi: TestScoreExclusiveDevices (card, used before, zone)
        (["GPU-4"], [("GPU-1", 1, 1), ("GPU-2", 1, 1), ("GPU-3", 1, 1), ("GPU-4", 0, 1)], 0),
        (["GPU-4"], [("GPU-1", 0, 1), ("GPU-2", 0, 1), ("GPU-3", 0, 1), ("GPU-4", 0, 1)], -30),
        (["GPU-3", "GPU-4"], [(f"GPU-{i}", 0, 1) for i in range(1, 5)], 60),
        (
            ["GPU-4", "GPU-5"],
            [(f"GPU-{i}", 0 if i in (4, 5) else 1, 1 if i < 5 else 2) for i in range(1, 9)],
            0,
        ),
        (
            ["GPU-1", "GPU-2", "GPU-3", "GPU-4"],
            [*((f"GPU-{i}", 0, 1) for i in range(1, 5)), ("GPU-5", 0, 2)],
            600,
        ),
        (
            ["GPU-3", "GPU-4", "GPU-5", "GPU-6"],
            [(f"GPU-{i}", 0, 1 if i < 5 else 2) for i in range(2, 7)],
            180,
        ),
        (
            [f"GPU-{i}" for i in range(1, 9)],
            [(f"GPU-{i}", 0, 1 if i < 5 else 2) for i in range(1, 9)],
            1200,
        ),
    ],
)
def test_whole_card_score(chosen: list[str], before: list[tuple[str, int, int]], want: int) -> None:
    cards = [card(sgpu(u, zone=z), used=used) for u, used, z in before]
    facts = NodeFacts("n1")
    # HAMi's policy layer: weight 10000, negated under spread.
    assert node_score(AWARE, cards, taken(*chosen), FitPod(), facts, BINPACK) == 10000.0 * want
    assert node_score(AWARE, cards, taken(*chosen), FitPod(), facts, SPREAD) == -10000.0 * want


@pytest.mark.parametrize(
    ("family", "annotation", "cores", "scored"),
    [
        # HAMi: TestNeedScore
        (AWARE, None, 100, True),
        (SGPU, None, 100, False),
        (AWARE, None, 99, False),
        (SGPU, "true", 100, True),  # the pod's annotation overrides the config...
        (AWARE, "0", 100, False),
        (AWARE, "yes", 100, True),  # ... where Go's ParseBool reads it
    ],
)
def test_topology_awareness(
    family: MetaxSgpu, annotation: str | None, cores: int, scored: bool
) -> None:
    cards = [card(sgpu(f"GPU-{i}", zone=1)) for i in range(1, 5)]
    annotations = {} if annotation is None else {"metax-tech.com/sgpu-topology-aware": annotation}
    score = node_score(
        family, cards, taken("GPU-4", cores=cores), FitPod(annotations), NodeFacts("n"), BINPACK
    )
    assert score == (-300000.0 if scored else 0.0)


@pytest.mark.parametrize(
    ("holders", "want"),
    [
        # HAMi: TestScoreOnlineDevices
        ((), 0),
        ((ON, ON), -40),
        ((OFF, OFF), -200),
        ((OFF, OFF, ON, ON), -44),
    ],
)
def test_online_score(holders: tuple[dict[str, str], ...], want: int) -> None:
    cards = [card(sgpu("GPU-123"), used=len(holders)), card(sgpu("GPU-9"))]
    pod = FitPod({CLASS: "online"}, holders={"GPU-123": holders, "GPU-9": (OFF,)})
    score = node_score(SGPU, cards, taken("GPU-123", cores=0), pod, NodeFacts("n"), BINPACK)
    assert score == 10000.0 * want


# --- annotations, claim, config -----------------------------------------------------------


def test_annotations_written_for_the_device_plugin() -> None:
    devices = (
        (),
        (
            ContainerDevice("GPU-1", 1024, 30, "Metax-SGPU"),
            ContainerDevice("GPU-2", 0, 0, "Metax-SGPU"),
        ),
    )
    text = ";GPU-1,Metax-SGPU,1024,30:GPU-2,Metax-SGPU,0,0:;"
    bind = BindContext("n1", 1764900000123456789)
    # HAMi: TestConvertHAMIPodDeviceToMetaxPodDevice; zero values omitted as Go omits them.
    assert SGPU.annotations(devices, bind) == {
        "hami.io/metax-sgpu-devices-to-allocate": text,
        "hami.io/metax-sgpu-devices-allocated": text,
        "metax-tech.com/gpu-devices-allocated": '[[],[{"uuid":"GPU-1","compute":30,"vRam":1024},{"uuid":"GPU-2"}]]',
        "metax-tech.com/predicate-time": "1764900000123456789",
    }
    assert SGPU.annotations(((),)) == {}
    assert SGPU.wire.lock_name == "hami.io/mutex.lock"


def pod(**annotations: str) -> dict[str, object]:
    """Only the annotations the family reads of a pod."""
    return {"metadata": {"annotations": annotations}}


@pytest.mark.parametrize(
    ("limits", "annotations", "want"),
    [
        # HAMi: TestMutateAdmission
        ({}, {QOS: "best-effort"}, Claim(False)),
        (
            {"metax-tech.com/sgpu": "1"},
            {QOS: "best-effortx"},
            Claim(True, error=f"{QOS} must be set one of [best-effort, fixed-share, burst-share]"),
        ),
        ({"metax-tech.com/sgpu": "1"}, {}, Claim(True, annotations=((QOS, "best-effort"),))),
        ({"metax-tech.com/sgpu": "1"}, {QOS: "burst-share"}, Claim(True)),
        (
            {"metax-tech.com/sgpu": "2"},
            {CLASS: "online"},
            Claim(True, error="app-class pod must request single device"),
        ),
        (
            {"metax-tech.com/sgpu": "1"},
            {CLASS: "oNLine"},
            Claim(True, error=f"{CLASS} must be set one of [online, offline]"),
        ),
        (
            {"metax-tech.com/sgpu": "1"},
            {CLASS: "offline", QOS: "best-effortx"},
            Claim(True, error=f"{QOS} must be set one of [best-effort, fixed-share, burst-share]"),
        ),
        ({"metax-tech.com/sgpu": "1"}, {CLASS: "online", QOS: "best-effortx"}, Claim(True)),
        # Go's Quantity.Value() rounds up: half a card is one.
        ({"metax-tech.com/sgpu": "0.5"}, {CLASS: "online"}, Claim(True)),
    ],
)
def test_claim(limits: dict[str, str], annotations: dict[str, str], want: Claim) -> None:
    assert SGPU.claim(container(limits), pod(**annotations)) == want


def test_claim_of_a_pod_without_annotations() -> None:
    # HAMi: "pod annotation nil"
    claim = SGPU.claim(container({"metax-tech.com/sgpu": "1"}), {"metadata": {}})
    assert claim == Claim(True, annotations=((QOS, "best-effort"),))


def test_config_from_the_charts_section() -> None:
    section = {
        "resourceCountName": "metax-tech.com/gpu",
        "resourceVCountName": "example.com/s",
        "resourceVMemoryName": "example.com/m",
        "resourceVCoreName": "example.com/c",
        "sgpuTopologyAware": True,
    }
    family = sgpu_from_config(section)
    assert family.wire.resources.all() == ("example.com/s", "example.com/m", "example.com/c")
    assert family.wire.resources.memory_factor == 1024
    want = FamilyRequest("Metax-SGPU", 1, 2048, 0, 40)
    got = family.container_request(
        container({"example.com/s": "1", "example.com/m": "2", "example.com/c": "40"})
    )
    assert got == want
    assert MetaxConfig.from_section({}) == MetaxConfig()
    # A name the section leaves out names no resource, as in HAMi.
    assert sgpu_from_config({"resourceVCountName": "x/s"}).wire.resources.all() == ("x/s",)
    with pytest.raises(ValueError, match="sgpuTopologyAware"):
        MetaxConfig.from_section({"sgpuTopologyAware": "yes"})


# --- property -----------------------------------------------------------------------------


@st.composite
def cards_and_request(draw: st.DrawFn) -> tuple[list[Card], FamilyRequest, FitPod]:
    cards = []
    for i in range(draw(st.integers(1, 6))):
        count = draw(st.integers(1, 4))
        mem = draw(st.integers(0, 4096))
        cores = draw(st.sampled_from([0, 50, 100]))
        used = draw(st.integers(0, count))
        info = sgpu(f"c{i}", count=count, mem=mem, cores=cores, zone=draw(st.integers(0, 2)))
        cards.append(card(info, used, draw(st.integers(0, mem)), draw(st.integers(0, cores))))
    request = FamilyRequest(
        "Metax-SGPU",
        draw(st.integers(1, 4)),
        draw(st.sampled_from([0, 1, 512, 2048])),
        draw(st.sampled_from([0, 50, 100])),
        draw(st.sampled_from([0, 30, 100])),
    )
    annotations = draw(st.sampled_from([{}, {CLASS: "offline"}, {QOS: "fixed-share"}]))
    return cards, request, FitPod(annotations)


@given(cards_and_request())
def test_a_fit_never_takes_a_card_beyond_its_capacity(
    case: tuple[list[Card], FamilyRequest, FitPod],
) -> None:
    cards, request, pod = case
    fit = SGPU.fit(cards, request, pod, ())
    if fit.devices is None:
        assert fit.reason
        return
    by_id = {c.info.id: c for c in cards}
    assert len(fit.devices) == request.nums
    assert len({d.uuid for d in fit.devices}) == request.nums
    for d in fit.devices:
        c = by_id[d.uuid]
        assert c.usage.used < c.info.count
        assert c.usage.usedmem + d.usedmem <= c.info.devmem
        assert c.usage.usedcores + d.usedcores <= c.info.devcore


def test_the_sample_registration_reads() -> None:
    from tests.families_samples import SAMPLE_NODE

    cards = SGPU.decode_node(SAMPLE_NODE["Metax-SGPU"])
    assert cards is not None
    assert [(c.id, c.numa, zone_of(c)) for c in cards] == [
        ("GPU-mx-0", 0, 1),
        ("GPU-mx-1", 0, 1),
        ("GPU-mx-2", 1, 2),
        ("GPU-mx-3", 1, 2),
    ]


def test_the_pod_annotations_the_family_reads_are_declared() -> None:
    # A caller that hands the family only these must hand it all it decides on.
    assert set(SGPU.wire.pod_annotations()) == {
        "metax-tech.com/use-gpuuuid",
        "metax-tech.com/nouse-gpuuuid",
        QOS,
        CLASS,
        "metax-tech.com/sgpu-topology-aware",
    }
