"""Kunlunxin XPUs behind the family seam, against HAMi v2.10's pkg/device/kunlun.

Expected values marked `HAMi:` are those of HAMi's own device_test.go / vdevice_test.go.
"""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.engine.families.base import Claim, FamilyRequest, FitPod, NodeFacts
from hami.engine.families.kunlun import VXPU_FAMILY, WHOLE_FAMILY, from_config, vxpu_size
from hami.engine.model import Card, ContainerDevice, DeviceInfo, Usage
from hami.engine.policy import CardFilter, NodePolicy
from hami.engine.requests import RequestError
from tests.families_samples import SAMPLE_ALLOCATABLE, SAMPLE_NODE
from tests.unit.engine.families.kit import ctr

XPU = "kunlunxin.com/xpu"
VX = "kunlunxin.com/vxpu"
VMEM = "kunlunxin.com/vxpu-memory"

BINPACK, SPREAD = NodePolicy.BINPACK, NodePolicy.SPREAD


def board(
    used: dict[int, tuple[int, int]] | None = None, n: int = 8, healthy: bool = True
) -> list[Card]:
    """An eight-XPU board in index order; `used` maps an index to (tasks, MiB)."""
    used = used or {}
    return [
        Card(
            DeviceInfo(f"xpu-{i}", i, 100, 98304, 100, "XPU", health=healthy),
            Usage(used.get(i, (0, 0))[0], used.get(i, (0, 0))[1]),
            0.0,
        )
        for i in range(n)
    ]


def busy(*indices: int) -> dict[int, tuple[int, int]]:
    return {i: (1, 0) for i in indices}


def whole(nums: int) -> FamilyRequest:
    return FamilyRequest("kunlun", nums, 0, 100, 0)


def vxpu(nums: int, mem: int) -> FamilyRequest:
    return FamilyRequest("XPU", nums, mem, 0, mem * 100 // 98304)


def picked(cards: list[Card], req: FamilyRequest, annos: dict[str, str] | None = None) -> list[int]:
    family = WHOLE_FAMILY if req.type == "kunlun" else VXPU_FAMILY
    got = family.fit(cards, req, FitPod(annos or {}), ())
    return [] if got.devices is None else [int(d.uuid.split("-")[1]) for d in got.devices]


def test_wire_and_config() -> None:
    assert (WHOLE_FAMILY.wire.type, VXPU_FAMILY.wire.type) == ("kunlun", "XPU")
    assert WHOLE_FAMILY.wire.resources.count == XPU
    assert (VXPU_FAMILY.wire.resources.count, VXPU_FAMILY.wire.resources.memory) == (VX, VMEM)
    assert WHOLE_FAMILY.wire.allocated_annotation == "hami.io/kunlun-allocated"
    assert WHOLE_FAMILY.wire.lock_name == ""  # HAMi locks no node for whole XPUs
    v = VXPU_FAMILY.wire
    assert (v.register_annotation, v.handshake_annotation) == (
        "hami.io/node-register-xpu",
        "hami.io/node-handshake-xpu",
    )
    assert (v.to_allocate_annotation, v.allocated_annotation, v.lock_name) == (
        "hami.io/xpu-devices-to-allocate",
        "hami.io/xpu-devices-allocated",
        "hami.io/mutex.lock",
    )
    for family in (WHOLE_FAMILY, VXPU_FAMILY):  # both fits read both selections
        assert set(family.wire.pod_annotations()) == {
            "hami.io/use-xpu-uuid", "hami.io/no-use-xpu-uuid", "baidu.com/use-gpuuuid", "baidu.com/nouse-gpuuuid",
        }  # fmt: skip
    renamed = from_config(
        {"resourceCountName": "acme.com/xpu", "resourceVMemoryName": "acme.com/m"}
    )
    assert renamed[0].wire.resources.count == "acme.com/xpu"
    assert renamed[1].wire.resources == type(renamed[1].wire.resources)(VX, "acme.com/m")


def test_whole_xpus_come_from_the_nodes_capacity() -> None:
    cards = WHOLE_FAMILY.decode_node({}, NodeFacts("n1", {XPU: "8"}))
    assert cards is not None
    assert [(c.id, c.index, c.numa, c.devmem, c.count) for c in cards[3:5]] == [
        ("n1-kunlun-3", 3, 0, 98304, 100),
        ("n1-kunlun-4", 4, 1, 98304, 100),
    ]
    assert WHOLE_FAMILY.decode_node({}, NodeFacts("n1", {XPU: "0"})) is None
    assert WHOLE_FAMILY.decode_node({}, NodeFacts("n1", {})) is None
    assert WHOLE_FAMILY.decode_node({}) is None  # capacity unknown


def test_vxpu_registration_is_the_plugins_json_list() -> None:
    cards = VXPU_FAMILY.decode_node(SAMPLE_NODE["XPU"])
    assert cards is not None and len(cards) == 8 and cards[7].index == 7
    assert cards[0].devmem == 98304
    assert VXPU_FAMILY.decode_node({}) is None
    assert set(SAMPLE_ALLOCATABLE["kunlun"]) == {XPU}
    assert WHOLE_FAMILY.decode_node(
        SAMPLE_NODE["kunlun"], NodeFacts("n", SAMPLE_ALLOCATABLE["kunlun"])
    )


@pytest.mark.parametrize(
    ("limits", "requests", "want"),
    [
        ({XPU: "2"}, None, ("kunlun", 2, 0, 100, 0)),
        # HAMi: "vcount without memory defaults to full device".
        ({VX: "1"}, None, ("XPU", 1, 98304, 100, 100)),
        # HAMi: "vcount with memory from requests fallback".
        ({VX: "2"}, {VMEM: "20000"}, ("XPU", 2, 24576, 0, 25)),
        ({VX: "1", VMEM: "30000"}, None, ("XPU", 1, 49152, 0, 50)),
        ({VX: "1", VMEM: "60000"}, None, ("XPU", 1, 98304, 0, 100)),
    ],
)
def test_requests(
    limits: dict[str, str], requests: dict[str, str] | None, want: tuple[Any, ...]
) -> None:
    family = WHOLE_FAMILY if XPU in limits else VXPU_FAMILY
    req = family.container_request(ctr(limits, requests))
    assert req is not None
    assert (req.type, req.nums, req.memreq, req.mem_percentage, req.coresreq) == want


def test_vxpu_sizes() -> None:
    # HAMi: Test_trimMemory.
    assert [vxpu_size(m) for m in (0, 24576, 24577, 49152, 49153, 200000)] == [
        24576, 24576, 49152, 49152, 98304, 98304,
    ]  # fmt: skip


@pytest.mark.parametrize("limits", [{XPU: "1.5"}, {XPU: "-1"}, {VX: "1", VMEM: "1.5"}])
def test_malformed_requests_are_no_ask_or_a_whole_card_unless_strict(
    limits: dict[str, str],
) -> None:
    family = WHOLE_FAMILY if XPU in limits else VXPU_FAMILY
    lenient = family.container_request(ctr(limits))
    # HAMi ignores a fractional vXPU memory (the whole card), and drops a malformed count.
    assert lenient is None or lenient.memreq == 98304
    with pytest.raises(RequestError):
        family.container_request(ctr(limits), strict=True)


# HAMi: Test_graphSelect (whole XPUs: idle cards only).
WHOLE_STEPS = [
    ("full allocate", {}, 8, [0, 1, 2, 3, 4, 5, 6, 7]),
    ("full allocate not success", busy(5), 8, []),
    ("allocate 2 cards", busy(5), 2, [4, 6]),
    ("allocate 1 card", busy(5), 1, [4]),
    ("allocate 1 card (two used on the right)", busy(6, 7), 1, [4]),
    ("allocate 2 cards according to interconnect", busy(0, 1, 2, 4, 5, 6), 2, [3, 7]),
    ("4 cards by interconnect from 5", busy(2, 3, 7), 4, [0, 1, 4, 5]),
    ("4 cards from 6, leave 2 unconnected", busy(3, 6), 4, [0, 1, 4, 5]),
    ("4 cards from 6, leave 2 connected", busy(2, 6), 4, [0, 1, 4, 5]),
    ("3 cards: no topology takes three", {}, 3, []),
    # One XPU goes to a group with 1, then 3, then 2, then 4 free: here 3 on the right.
    ("1 card: three free beat two free", busy(0, 1, 4), 1, [5]),
    ("2 cards: the group with exactly two free", busy(0, 1, 4), 2, [2, 3]),
    ("2 cards: one free in each group but not linked", busy(0, 1, 2, 4, 5, 7), 2, []),
]


@pytest.mark.parametrize(
    ("name", "used", "nums", "want"), WHOLE_STEPS, ids=[s[0] for s in WHOLE_STEPS]
)
def test_whole_xpu_topology(
    name: str, used: dict[int, tuple[int, int]], nums: int, want: list[int]
) -> None:
    assert picked(board(used), whole(nums)) == want


# HAMi: Test_graphSelectVXPU (vXPUs share a card only with vXPUs of their size).
VXPU_STEPS = [
    ("full allocate with unused devices", {}, 8, 24576, [0, 1, 2, 3, 4, 5, 6, 7]),
    ("matching memory", {1: (1, 24576), 3: (2, 49152), 5: (1, 49152)}, 4, 24576, [0, 1, 2, 3]),
    ("mixed memory", {1: (2, 49152), 3: (1, 49152), 5: (1, 24576)}, 4, 24576, [4, 5, 6, 7]),
    ("no card of the size", {i: (1, 49152) for i in range(8)}, 2, 24576, []),
    ("1 card with matching memory", {0: (1, 24576), 1: (1, 24576), 2: (1, 49152), 5: (1, 24576)}, 1,
     24576, [0]),
    ("2 cards of different memory", {1: (2, 49152), 2: (1, 24576), 3: (1, 49152), 6: (1, 24576)}, 2,
     24576, [0, 1]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "used", "nums", "mem", "want"), VXPU_STEPS, ids=[s[0] for s in VXPU_STEPS]
)
def test_vxpu_topology(
    name: str, used: dict[int, tuple[int, int]], nums: int, mem: int, want: list[int]
) -> None:
    assert picked(board(used), vxpu(nums, mem)) == want


def test_a_larger_board_joins_four_only_from_four_to_six_free() -> None:
    # Ten XPUs, two free on the left and all six on the right: no group has exactly four
    # free, and HAMi's linked sets are tried only when four to six are free in all.
    assert picked(board(busy(2, 3), n=10), whole(4)) == []
    assert picked(board(busy(2, 3, 6, 7, 8), n=10), whole(4)) == [0, 1, 4, 5]


def test_fit_failures_name_hamis_reasons() -> None:
    # HAMi: TestKunlunDevices_Fit_NumaNotFit and TestKunlunVDevices_Fit_NumaNotFit.
    got = WHOLE_FAMILY.fit(board(busy(*range(8))), whole(1), FitPod(), ())
    assert (got.devices, got.reason) == (None, "1/8 NumaNotFit")
    small = [Card(DeviceInfo(f"x{i}", i, 100, 1024, 100, "XPU"), Usage(), 0.0) for i in range(8)]
    assert VXPU_FAMILY.fit(small, vxpu(1, 2048), FitPod(), ()).reason == "1/8 NumaNotFit"
    # HAMi: TestKunlunVDevices_Fit_Mutex: shared cards fit, but not under `mutex`.
    shared = board({i: (1, 24576) for i in range(8)})
    assert VXPU_FAMILY.fit(shared, vxpu(1, 24576), FitPod(), ()).devices is not None
    got = VXPU_FAMILY.fit(shared, vxpu(1, 24576), FitPod(filters=frozenset({CardFilter.MUTEX})), ())
    assert got.reason == "8/8 ExclusiveDeviceAllocateConflict"
    assert WHOLE_FAMILY.fit(board(healthy=False), whole(1), FitPod(), ()).reason == "1/8 NumaNotFit"


@pytest.mark.parametrize(
    ("annos", "want"),
    [
        ({"baidu.com/use-gpuuuid": "xpu-5"}, [5]),  # HAMi: the plugin's own (legacy) key
        ({"hami.io/use-xpu-uuid": "xpu-3"}, [3]),
        ({"hami.io/use-xpu-uuid": "xpu-6"}, [6]),
    ],
)
def test_uuid_selection(annos: dict[str, str], want: list[int]) -> None:
    # HAMi: TestKunlunDevices_Fit_UseUUID / TestKunlunVDevices_Fit_UUIDAnnotations.
    assert picked(board(), whole(1), annos) == want
    assert picked(board(), vxpu(1, 98304), annos) == want


def test_uuid_exclusion_names_the_mismatch() -> None:
    everything = ",".join(f"xpu-{i}" for i in range(8))
    for key in ("baidu.com/nouse-gpuuuid", "hami.io/no-use-xpu-uuid"):
        got = WHOLE_FAMILY.fit(board(), whole(1), FitPod({key: everything}), ())
        assert got.reason == "8/8 CardUuidMismatch"
    got = VXPU_FAMILY.fit(board(), vxpu(1, 98304), FitPod({"hami.io/use-xpu-uuid": "xpu-99"}), ())
    assert got.reason == "8/8 CardUuidMismatch"


def test_whole_xpus_take_the_whole_card() -> None:
    got = WHOLE_FAMILY.fit(board(), whole(1), FitPod(), ())
    assert got.devices == (ContainerDevice("xpu-0", 98304, 100, "kunlun"),)
    got = VXPU_FAMILY.fit(board(), vxpu(1, 24576), FitPod(), ())
    assert got.devices == (ContainerDevice("xpu-0", 24576, 25, "XPU"),)


def test_score_node_prefers_fewer_stranded_xpus() -> None:
    # HAMi: Test_ScoreNode, scenarios 1 (3000) and 2 (0).
    left_busy = board(busy(0, 1, 2, 3))
    all_eight = tuple(ContainerDevice(f"xpu-{i}", 98304, 100, "kunlun") for i in range(8))
    assert WHOLE_FAMILY.score_node(left_busy, (all_eight,), BINPACK) == 3000.0
    assert WHOLE_FAMILY.score_node(board(), ((all_eight[0],),), SPREAD) == 0.0
    assert WHOLE_FAMILY.score_node(board(), (all_eight[:4],), BINPACK) == 2000.0
    assert VXPU_FAMILY.score_node(left_busy, (all_eight,), BINPACK) == 0.0


def test_annotations() -> None:
    devs = (
        (
            ContainerDevice("n-kunlun-4", 98304, 100, "kunlun"),
            ContainerDevice("n-kunlun-6", 98304, 100, "kunlun"),
        ),
    )
    assert WHOLE_FAMILY.annotations(devs) == {
        "hami.io/kunlun-allocated": "n-kunlun-4,kunlun,98304,100:n-kunlun-6,kunlun,98304,100:;",
        "BAIDU_COM_DEVICE_IDX": "4,6",
    }
    # HAMi writes the index key per container: the last container with XPUs wins.
    two = ((ContainerDevice("n-kunlun-1", 98304, 100, "kunlun"),), *devs, ())
    assert WHOLE_FAMILY.annotations(two)["BAIDU_COM_DEVICE_IDX"] == "4,6"
    v = ((ContainerDevice("xpu-0", 24576, 25, "XPU"),),)
    assert VXPU_FAMILY.annotations(v) == {
        "hami.io/xpu-devices-to-allocate": "xpu-0,XPU,24576,25:;",
        "hami.io/xpu-devices-allocated": "xpu-0,XPU,24576,25:;",
    }
    assert WHOLE_FAMILY.annotations(((),)) == {}


def sized(memory: str) -> Claim:
    return Claim(True, limits=((VMEM, memory),), requests=((VMEM, memory),))


@pytest.mark.parametrize(
    ("container", "family", "want"),
    [
        (ctr({XPU: "1"}), WHOLE_FAMILY, Claim(True)),
        (ctr(None, {XPU: "1"}), WHOLE_FAMILY, Claim(False)),
        (ctr({VX: "1"}), VXPU_FAMILY, Claim(True)),
        # HAMi: Test_MutateAdmission: the memory limit rounds up to a size, in both places.
        (ctr({VX: "1", VMEM: "1000"}), VXPU_FAMILY, sized("24576")),
        (ctr({VX: "1", VMEM: "50000"}), VXPU_FAMILY, sized("98304")),
        (ctr({VMEM: "1000"}), VXPU_FAMILY, Claim(False)),
    ],
)  # fmt: skip
def test_claim(container: dict[str, Any], family: Any, want: Claim) -> None:
    assert family.claim(container, {}) == want


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from([24576, 49152, 98304])), min_size=8, max_size=8
    ),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([24576, 49152, 98304]),
    st.booleans(),
)
def test_fit_never_exceeds_a_cards_capacity(
    shape: list[tuple[int, int]], nums: int, mem: int, is_whole: bool
) -> None:
    cards = board(
        {i: (u, size * u if size * u <= 98304 else 98304) for i, (u, size) in enumerate(shape)}
    )
    family = WHOLE_FAMILY if is_whole else VXPU_FAMILY
    req = whole(nums) if is_whole else vxpu(nums, mem)
    got = family.fit(cards, req, FitPod(), ())
    for d in got.devices or ():
        c = next(c for c in cards if c.info.id == d.uuid)
        assert c.usage.usedmem + d.usedmem <= c.info.devmem
        assert not is_whole or c.usage.used == 0
    assert got.devices is None or len({d.uuid for d in got.devices}) == nums


def test_a_card_the_engine_distrusts_is_not_taken() -> None:
    cards = [Card(c.info, c.usage, 0.0, untrusted=c.info.index == 0) for c in board()]
    assert picked(cards, whole(1)) == [1]
    assert picked(cards, vxpu(1, 24576)) == [1]
