"""Huawei Ascend behind the family seam, against HAMi v2.10's pkg/device/ascend.

Expected values marked `HAMi:` are those of HAMi's own device_test.go (the case named).
"""

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.cache.store import ClusterCache
from hami.engine.codec import CodecError
from hami.engine.families.ascend import DEFAULT_VNPUS, from_config
from hami.engine.families.base import BindContext, Claim, FamilyRequest, FitPod
from hami.engine.model import Card, ContainerDevice, DeviceInfo, Usage
from hami.engine.policy import CardFilter, Defaults, NodePolicy
from hami.engine.requests import RequestError, ResourceDefaults
from hami.service.placement import Placement
from tests.builders import FAMILIES, family_pod, sample_node
from tests.families_samples import SAMPLE_ALLOCATABLE, SAMPLE_NODE

KINDS = {f.wire.type: f for f in from_config(DEFAULT_VNPUS)}
B3 = KINDS["Ascend910B3"]
A910 = KINDS["Ascend910A"]
P310 = KINDS["Ascend310P"]
C910 = KINDS["Ascend910C"]
SOFT = {"huawei.com/vnpu-mode": "hami-core"}

BINPACK, SPREAD = NodePolicy.BINPACK, NodePolicy.SPREAD


def card(
    uuid: str,
    mem: int = 128,
    *,
    index: int = 0,
    used: int = 0,
    usedmem: int = 0,
    usedcores: int = 0,
    count: int = 100,
    core: int = 100,
    health: bool = True,
    net: int | None = None,
    extra: tuple[tuple[str, str], ...] = (),
) -> Card:
    if net is not None:
        extra = (*extra, ("NetworkID", str(net)))
    info = DeviceInfo(
        uuid, index, count, mem, core, "Ascend910B3", health=health, custom=tuple(sorted(extra))
    )
    return Card(info, Usage(used, usedmem, usedcores), 0.0)


def ask(
    nums: int, mem: int = 0, cores: int = 0, pct: int = 0, kind: str = "Ascend910B3"
) -> FamilyRequest:
    return FamilyRequest(kind, nums, mem, pct, cores)


def ctr(limits: dict[str, Any], requests: dict[str, Any] | None = None) -> dict[str, Any]:
    res: dict[str, Any] = {"limits": limits}
    if requests is not None:
        res["requests"] = requests
    return {"name": "c", "resources": res}


def test_default_config_is_the_charts_seven_chip_kinds() -> None:
    assert list(KINDS) == [
        "Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4-1", "Ascend910B4",
        "Ascend310P", "Ascend910C",
    ]  # fmt: skip
    w = B3.wire
    assert (w.resources.count, w.resources.memory, w.resources.cores) == (
        "huawei.com/Ascend910B3",
        "huawei.com/Ascend910B3-memory",
        "huawei.com/Ascend910B3-core",
    )
    assert w.register_annotation == "hami.io/node-register-Ascend910B3"
    assert w.handshake_annotation == "hami.io/node-handshake-Ascend910B3"
    assert w.to_allocate_annotation == "hami.io/Ascend910B3-devices-to-allocate"
    assert w.allocated_annotation == "hami.io/Ascend910B3-devices-allocated"
    assert (w.use_uuid, w.nouse_uuid) == (
        "hami.io/use-Ascend910B3-uuid",
        "hami.io/no-use-Ascend910B3-uuid",
    )
    assert w.lock_name == "hami.io/mutex.lock"
    # The fit reads the split mode: the pod's options must carry it.
    assert "huawei.com/vnpu-mode" in w.pod_annotations()
    assert [t.name for t in P310.config.templates] == ["vir01", "vir02", "vir04"]


def test_decode_registration_as_the_ascend_plugin_writes_it() -> None:
    value = orjson.dumps(
        [
            {"id": "npu-0", "count": 4, "devmem": 65536, "devcore": 20, "type": "Ascend910B3",
             "health": True, "custominfo": {"NetworkID": 0}},
            {"id": "npu-1", "index": 1, "count": 4, "devmem": 65536, "devcore": 20,
             "type": "Ascend910B3", "health": True, "custominfo": {"NetworkID": 1}},
        ]
    ).decode()  # fmt: skip
    cards = B3.decode_node({"hami.io/node-register-Ascend910B3": value})
    assert cards is not None
    assert [(c.id, c.index, c.devmem, c.devcore, c.custom_value("NetworkID")) for c in cards] == [
        ("npu-0", 0, 65536, 20, "0"),
        ("npu-1", 1, 65536, 20, "1"),
    ]
    # Another chip kind's registration is not this kind's.
    assert A910.decode_node({"hami.io/node-register-Ascend910B3": value}) is None
    # The node's word on the soft split travels with its cards.
    soft = B3.decode_node({"hami.io/node-register-Ascend910B3": value, "hami-vnpu-core": "true"})
    assert soft is not None and soft[0].custom_value("hami-vnpu-core") == "true"
    # HAMi reads only JSON here (UnMarshalNodeDevices), not the old colon form.
    with pytest.raises(CodecError):
        B3.decode_node(
            {"hami.io/node-register-Ascend910B3": "npu-0,4,65536,20,Ascend910B3,0,true:"}
        )


R = "huawei.com/Ascend910B3"


@pytest.mark.parametrize(
    ("limits", "want"),
    [
        ({R: "1"}, (1, 0, 100, 0)),  # count only: the whole card
        ({R: "2", f"{R}-memory": "16384"}, (2, 16384, 0, 0)),
        ({R: "1", f"{R}-memory": "5000"}, (1, 5000, 0, 0)),  # raw: the webhook rounds, not this
        ({R: "1", f"{R}-core": "1500m"}, (1, 0, 100, 2)),  # cores rounded up (Quantity.Value)
        ({R: "1", f"{R}-memory": "1.5"}, (1, 0, 100, 0)),  # a fractional memory is ignored
    ],
)
def test_requests(limits: dict[str, str], want: tuple[int, int, int, int]) -> None:
    req = B3.container_request(ctr(limits))
    assert req is not None
    assert (req.nums, req.memreq, req.mem_percentage, req.coresreq) == want


@pytest.mark.parametrize(
    "limits",
    [
        {R: "1", f"{R}-memory": "16Gi"},  # HAMi: "memory requested in bytes exceeds int32 range"
        {R: "1", f"{R}-memory": "-1"},  # HAMi: "negative whole memory request"
        {R: "1", f"{R}-memory": "-1m"},  # HAMi: "negative fractional memory request"
        {R: "4294967296"},  # HAMi: "oversized device count exceeds int32 range"
        {R: "1", f"{R}-core": "-1"},  # HAMi: "negative core request"
        {R: "1.5"},
    ],
)
def test_malformed_requests_are_no_ask_unless_strict(limits: dict[str, str]) -> None:
    assert B3.container_request(ctr(limits)) is None
    with pytest.raises(RequestError):
        B3.container_request(ctr(limits), strict=True)


def test_memory_factor_scales_the_memory_asked() -> None:
    # HAMi: "factor 10".
    factored = from_config({"configs": [{**DEFAULT_VNPUS["configs"][2], "memoryFactor": 10}]})[0]
    req = factored.container_request(ctr({R: "1", f"{R}-memory": "1024"}))
    assert req is not None and req.memreq == 10240
    assert B3.container_request(ctr({"nvidia.com/gpu": "1"})) is None


# (name, cards, request, pod annotations, picked ids or None, reason)
FITS: list[tuple[str, list[Card], FamilyRequest, dict[str, str], list[str] | None, str]] = [
    ("HAMi: fit success", [card("dev-0"), card("dev-1")], ask(1, 64, 50), {}, ["dev-1"], ""),
    ("HAMi: memory not enough", [card("dev-0")], ask(1, 512, 50), {}, None, "1/1 CardInsufficientMemory"),
    ("HAMi: core not enough", [card("dev-0", 1024, usedcores=100)], ask(1, 512, 50), {}, None,
     "1/1 CardInsufficientCore"),
    ("HAMi: use uuid mismatch", [card("dev-1", 1280)], ask(2, 512, 50),
     {"hami.io/use-Ascend910B3-uuid": "dev-0"}, None, "1/1 CardUuidMismatch"),
    ("HAMi: no-use uuid match", [card("dev-0", 1280)], ask(2, 512, 50),
     {"hami.io/no-use-Ascend910B3-uuid": "dev-0"}, None, "1/1 CardUuidMismatch"),
    ("HAMi: card overused", [card("dev-0", 1280, used=100)], ask(1, 512, 50), {}, None,
     "1/1 CardTimeSlicingExhausted"),
    ("HAMi: core limit can't exceed 100", [card("dev-0", 1280)], ask(1, 512, 120), {}, ["dev-0"], ""),
    ("HAMi: card exclusively", [card("dev-0", 1280, used=1)], ask(1, 512, 100), {}, None,
     "1/1 ExclusiveDeviceAllocateConflict"),
    ("HAMi: compute units exhausted", [card("dev-0", 1280, used=1, usedcores=100)], ask(1, 512, 0), {},
     None, "1/1 CardComputeUnitsExhausted"),
    ("HAMi: partial allocation", [card("dev-0", 1280), card("dev-1", 1280)], ask(3, 512, 10), {}, None,
     "2/2 AllocatedCardsInsufficientRequest"),
    ("HAMi: memory percentage", [card("dev-0", 1280)], ask(1, 0, 0, 100), {}, ["dev-0"], ""),
    ("HAMi: not healthy", [card("dev-0", health=False)], ask(1, 64), {}, None, "1/1 CardNotHealth"),
    ("HAMi: schedule by NetworkID", [card("dev-0", net=0), card("dev-1", net=1), card("dev-2", net=1)],
     ask(2, 64, 50), {}, ["dev-2", "dev-1"], ""),
    ("NetworkID: the fullest group wins though the walk meets the other first",
     [card("a", net=5), card("b", net=5), card("c", net=7)], ask(2, 64), {}, ["b", "a"], ""),
    ("HAMi: hami-core pod on a node without the soft split", [card("dev-0", 32768)],
     ask(1, 15360, 20), SOFT, None, "1/1 ModeNotFit"),
    ("HAMi: annotation-less pod on a hami-core node",
     [card("dev-0", 32768, extra=(("hami-vnpu-core", "true"),))], ask(1, 8738), {}, ["dev-0"], ""),
    ("soft split: cards count as 100 cores, a 20-core card takes 50",
     [card("dev-0", 32768, core=20, extra=(("hami-vnpu-core", "true"),))], ask(1, 1024, 50), SOFT,
     ["dev-0"], ""),
    ("hard split: a 20-core card cannot take 50", [card("dev-0", 32768, core=20)], ask(1, 1024, 50), {},
     None, "1/1 CardInsufficientCore"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "cards", "req", "annos", "want", "reason"), FITS, ids=[f[0] for f in FITS]
)
def test_fit(
    name: str,
    cards: list[Card],
    req: FamilyRequest,
    annos: dict[str, str],
    want: list[str] | None,
    reason: str,
) -> None:
    got = B3.fit(cards, req, FitPod(annos), ())
    assert got.reason == reason
    if want is None:
        assert got.devices is None
    else:
        assert got.devices is not None
        assert [d.uuid for d in got.devices] == want


def test_mutex_policy_keeps_used_cards_out() -> None:
    got = B3.fit([card("dev-0", used=1)], ask(1, 64), FitPod({}, frozenset({CardFilter.MUTEX})), ())
    assert got.reason == "1/1 ExclusiveDeviceAllocateConflict"


def test_soft_split_follows_the_global_default_without_a_node_word() -> None:
    soft_default = from_config({**DEFAULT_VNPUS, "hamiVnpuCore": True})[2]
    assert soft_default.fit([card("dev-0")], ask(1, 64), FitPod(SOFT), ()).devices is not None
    node_says_no = card("dev-0", extra=(("hami-vnpu-core", "false"),))
    assert soft_default.fit([node_says_no], ask(1, 64), FitPod(SOFT), ()).reason == "1/1 ModeNotFit"


def test_910c_takes_whole_modules_only() -> None:
    # HAMi: "fit success: Ascend910C topology-aware allocation (full modules only)".
    cards = [card("dev-0", index=0), card("dev-1", index=1), card("dev-2", index=2)]
    got = C910.fit(cards, ask(2, 128, kind="Ascend910C"), FitPod(), ())
    assert got.devices is not None and [d.uuid for d in got.devices] == ["dev-1", "dev-0"]
    # Two half modules are not a module: HAMi counts the failure against the request.
    halves = [card("dev-1", index=1), card("dev-2", index=2), card("dev-5", index=5)]
    got = C910.fit(halves, ask(2, 128, kind="Ascend910C"), FitPod(), ())
    assert got.devices is None and got.reason == "0/2 AllocatedCardsInsufficientRequest"


def test_score_node_rewards_one_network_group() -> None:
    cards = [card("a", net=0), card("b", net=0), card("c", net=1)]
    dev = [ContainerDevice(u, 64, 0, "Ascend910B3") for u in ("a", "b", "c")]
    assert B3.score_node(cards, ((dev[0], dev[1]),), BINPACK) == 10.0
    assert B3.score_node(cards, ((dev[0], dev[2]),), BINPACK) == 5.0
    # Go float32: two of three in one group is 6.6666670 (float32), not 6.666666666666667.
    assert B3.score_node(cards, ((dev[0], dev[1], dev[2]),), BINPACK) == 6.6666669845581055
    assert B3.score_node([card("a"), card("c")], ((dev[0], dev[2]),), BINPACK) == 0.0
    assert P310.score_node(cards, ((dev[0], dev[1]),), BINPACK) == 0.0  # not a 910 kind


def test_annotations_name_each_npus_template_or_share() -> None:
    # HAMi: Test_PatchAnnotations "exist device".
    bind = BindContext(now_ns=1_700_000_000_999_999_999)
    out = A910.annotations(((ContainerDevice("device-0", 8738, 1, "Ascend910A"),),), bind)
    assert out == {
        "hami.io/Ascend910A-devices-to-allocate": "device-0,Ascend910A,8738,1:;",
        "hami.io/Ascend910A-devices-allocated": "device-0,Ascend910A,8738,1:;",
        "huawei.com/Ascend910A": '[{"UUID":"device-0","temp":"vir08","memory":8738,"core":1}]',
        "predicate-time": "1700000000",
    }
    # HAMi: "vNPU-mode patch": the soft split names memory and cores, no template.
    fitted = B3.fit(
        [card("u", 65536, extra=(("hami-vnpu-core", "true"),))], ask(1, 8192, 5), FitPod(SOFT), ()
    )
    assert fitted.devices is not None
    out = B3.annotations((fitted.devices,))
    assert out["huawei.com/Ascend910B3"] == '[{"UUID":"u","memory":8192,"core":5}]'
    assert B3.annotations(((),)) == {}


MEM = "huawei.com/Ascend910A-memory"
A = "huawei.com/Ascend910A"


@pytest.mark.parametrize(
    ("container", "annos", "want"),
    [
        # HAMi: "resourcename and resourcememoryname set to resources limits": 1024 -> vir02.
        (ctr({A: "1", MEM: "1024"}), {}, Claim(True, limits=((MEM, "2184"),), requests=((MEM, "2184"),))),
        # HAMi: "not within the template scope, but smaller than MemoryCapacity": the whole card.
        (ctr({A: "1", MEM: "20000"}), {}, Claim(True, limits=((MEM, "32768"),), requests=((MEM, "32768"),))),
        (ctr({A: "1", MEM: "40000"}), {}, Claim(False, error=f"{MEM} 40000 is invalid")),
        (ctr({A: "1"}), {}, Claim(True, limits=((MEM, "32768"),), requests=((MEM, "32768"),))),
        (ctr({A: "2", MEM: "1024"}), {}, Claim(True, error="vNPU not supported for multiple devices")),
        # HAMi: "vNPU-mode hami-core: keep raw memory".
        (ctr({A: "2", MEM: "1000"}), SOFT, Claim(True, limits=((MEM, "1000"),), requests=((MEM, "1000"),))),
        # HAMi: "hard split with core is rejected" / "hard split with core=0 is allowed".
        (ctr({A: "1", f"{A}-core": "10"}), {},
         Claim(False, error=f"{A}-core is only supported in hami-core (soft split) mode")),
        (ctr({A: "1", f"{A}-core": "0"}), {}, Claim(True, limits=((MEM, "32768"),), requests=((MEM, "32768"),))),
        (ctr({"nvidia.com/gpu": "1"}), {}, Claim(False)),
        (ctr({}, {A: "1"}), {}, Claim(False)),  # only a limit is claimed
    ],
)  # fmt: skip
def test_claim(container: dict[str, Any], annos: dict[str, str], want: Claim) -> None:
    assert A910.claim(container, {"metadata": {"annotations": annos}}) == want


def test_claim_sets_runtime_class_and_rounds_910c_to_a_module() -> None:
    with_rc = from_config(
        {"configs": [{**c, "runtimeClassName": "ascend"} for c in DEFAULT_VNPUS["configs"]]}
    )
    claim = with_rc[0].claim(ctr({A: "1"}), {})
    assert claim.pod_fields == (("runtimeClassName", "ascend"),)
    c = "huawei.com/Ascend910C"
    # HAMi: "910C: request 1 -> auto adjust to 2", "request 3 -> reject", "request 4 -> valid".
    one = C910.claim(ctr({c: "1"}, {c: "1"}), {})
    assert one.claimed and (c, "2") in one.limits and (c, "2") in one.requests
    three = C910.claim(ctr({c: "3"}), {})
    assert three == Claim(False, error="Ascend910C device request must be 1 or 2*n, got 3")
    four = C910.claim(ctr({c: "4"}), {})
    assert four.claimed and not four.error and all(k != c for k, _ in four.limits)


def test_overwrite_env_empties_visible_devices_for_containers_without_npus() -> None:
    env = from_config({"configs": [{**DEFAULT_VNPUS["configs"][0], "overwriteEnv": "true"}]})[0]
    assert env.claim(ctr({"cpu": "1"}), {}) == Claim(False, env=(("ASCEND_VISIBLE_DEVICES", ""),))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 4), st.integers(0, 4), st.integers(0, 2048), st.integers(0, 100)),
        min_size=1,
        max_size=6,
    ),
    st.integers(1, 4),
    st.integers(0, 2048),
    st.integers(0, 120),
    st.booleans(),
)
def test_fit_never_exceeds_a_cards_capacity(
    shape: list[tuple[int, int, int, int]], nums: int, mem: int, cores: int, net: bool
) -> None:
    cards = [
        card(f"n{i}", 2048, index=i, count=cnt, used=min(u, cnt), usedmem=um, usedcores=uc,
             net=i % 2 if net else None)
        for i, (cnt, u, um, uc) in enumerate(shape)
    ]  # fmt: skip
    for family in (B3, C910):
        got = family.fit(cards, ask(nums, mem, cores, 100 if mem == 0 else 0), FitPod(), ())
        for d in got.devices or ():
            c = next(c for c in cards if c.info.id == d.uuid)
            assert c.usage.used < c.info.count
            assert c.usage.usedmem + d.usedmem <= c.info.devmem
            assert c.usage.usedcores + d.usedcores <= c.info.devcore
        assert got.devices is None or len(got.devices) == nums


def test_the_e2e_sample_registration_decodes() -> None:
    sample = SAMPLE_NODE["Ascend910B3"]
    cards = B3.decode_node(sample)
    assert cards is not None and [_network_of_card(c) for c in cards] == ["0"] * 4 + ["1"] * 4
    assert B3.wire.handshake_annotation in sample
    assert set(SAMPLE_ALLOCATABLE["Ascend910B3"]) <= set(B3.wire.resources.all())


def _network_of_card(c: DeviceInfo) -> str | None:
    return c.custom_value("NetworkID")


def test_a_chip_kind_is_placed_on_its_own_cards_only() -> None:
    """A deliberate difference (docs/families.md): HAMi offers an `Ascend910B4` request the
    `Ascend910B4-1` NPUs too (the type as a substring of the card's), and writes an allocation
    no plugin on that node reads; the registration's kind decides here."""
    cache = ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    b4_1 = FAMILIES.by_type()["Ascend910B4-1"]
    cache.replace_nodes([sample_node("n", b4_1)])
    pod = family_pod("p", FAMILIES.by_type()["Ascend910B4"])
    outcome = Placement(cache, Defaults(), ResourceDefaults()).filter(pod, ["n"])
    assert outcome.decision is not None and outcome.decision.node is None
    b4_1_pod = family_pod("q", b4_1)
    placed = Placement(cache, Defaults(), ResourceDefaults()).filter(b4_1_pod, ["n"]).decision
    assert placed is not None and placed.node == "n"
