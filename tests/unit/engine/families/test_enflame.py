"""Enflame GCUs behind the family seam, against HAMi v2.10's pkg/device/enflame.

Expected values marked `HAMi:` are those of HAMi's own device_test.go / gcu_test.go.
"""

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.engine.codec import CodecError
from hami.engine.families.base import BindContext, Claim, FamilyRequest, FitPod, NodeFacts
from hami.engine.families.enflame import DRS_FAMILY, WHOLE_FAMILY, from_config
from hami.engine.families.enflame.profiles import decode_drs, profile_shape
from hami.engine.model import Card, ContainerDevice, DeviceInfo, Usage
from hami.engine.policy import CardFilter
from hami.engine.requests import RequestError
from tests.families_samples import SAMPLE_ALLOCATABLE, SAMPLE_NODE
from tests.unit.engine.families.kit import ctr

GCU = "enflame.com/gcu"
SLICES = "enflame.com/drs-gcu"
MEM = "enflame.com/gcu-memory"
CORE = "enflame.com/gcu-core"
# HAMi: TestGetNodeDevices_DRSAnnotation's capacity annotation.
CAPACITY = (
    '{"devices":[{"index":"0","minor":"0","capacity":6}],'
    '"profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}'
)


def drs_cards(
    value: str = CAPACITY, used: dict[int, tuple[int, int, int]] | None = None, healthy: bool = True
) -> list[Card]:
    used = used or {}
    out = []
    for info in decode_drs(value, "node-a"):
        u = used.get(info.index, (0, 0, 0))
        out.append(Card(info if healthy else _sick(info), Usage(*u), 0.0))
    return out


def _sick(info: DeviceInfo) -> DeviceInfo:
    return DeviceInfo(info.id, info.index, info.count, info.devmem, info.devcore, info.type,
                      health=False, custom=info.custom)  # fmt: skip


def gcus(*used: int, healthy: bool = True) -> list[Card]:
    return [
        Card(
            DeviceInfo(f"dev-{i}", i, 1, 100, 100, "GCU", health=healthy),
            Usage(u, 100 * u, 100 * u),
            0.0,
        )
        for i, u in enumerate(used)
    ]


def slices(n: int) -> FamilyRequest:
    return FamilyRequest("Enflame", 1, n, 0, 0)


def spec(mem: int, cores: int = 0) -> FamilyRequest:
    return FamilyRequest("Enflame", 1, mem, -1, cores)


def test_wires() -> None:
    w, d = WHOLE_FAMILY.wire, DRS_FAMILY.wire
    assert (w.type, w.resources.count, w.to_allocate_annotation, w.allocated_annotation) == (
        "GCU",
        GCU,
        "hami.io/enflame-gcu-devices-to-allocate",
        "hami.io/enflame-gcu-devices-allocated",
    )
    assert (d.type, d.register_annotation, d.allocated_annotation, d.to_allocate_annotation) == (
        "Enflame",
        "enflame.com/gcu-drs-capacity",
        "hami.io/enflame-vgpu-devices-allocated",
        "",
    )
    assert (d.resources.count, d.resources.memory, d.resources.cores) == (SLICES, MEM, CORE)
    assert (w.lock_name, d.lock_name) == ("", "")  # HAMi locks no node for Enflame
    # The DRS count's legacy name (resourceNameVGCU) stands in when the new one is absent.
    assert (
        from_config({"resourceNameVGCU": "enflame.com/vgcu"})[1].wire.resources.count
        == "enflame.com/vgcu"
    )


def test_whole_gcus_come_from_the_nodes_capacity() -> None:
    # HAMi: TestGCUDevices_GetNodeDevices.
    cards = WHOLE_FAMILY.decode_node({}, NodeFacts("testnode", {GCU: "2"}))
    assert cards is not None
    assert [(c.id, c.count, c.devmem, c.devcore, c.type) for c in cards] == [
        ("testnode-GCU-0", 1, 100, 100, "GCU"),
        ("testnode-GCU-1", 1, 100, 100, "GCU"),
    ]
    assert WHOLE_FAMILY.decode_node({}, NodeFacts("n", {GCU: "0"})) is None
    assert WHOLE_FAMILY.decode_node(SAMPLE_NODE["GCU"], NodeFacts("n", SAMPLE_ALLOCATABLE["GCU"]))


def test_drs_registration() -> None:
    # HAMi: TestGetNodeDevices_DRSAnnotation.
    cards = DRS_FAMILY.decode_node({"enflame.com/gcu-drs-capacity": CAPACITY}, NodeFacts("node-a"))
    assert cards is not None and len(cards) == 1
    c = cards[0]
    assert (c.id, c.type, c.devmem, c.count, c.custom_value("minor")) == (
        "node-a-enflame-drs-0",
        "Enflame",
        40960,
        6,
        "0",
    )
    assert DRS_FAMILY.decode_node({}) is None
    sample = DRS_FAMILY.decode_node(SAMPLE_NODE["Enflame"], NodeFacts("n"))
    assert sample is not None and [x.count for x in sample] == [6, 6]
    # Go's reader: a string capacity, keys in any case, a missing minor is the index.
    odd = '{"Devices":[{"Index":"3","capacity":" 4 "}],"profiles":{"2g.16gb":"a"}}'
    (card,) = decode_drs(odd, "n")
    assert (card.index, card.count, card.devmem, card.custom_value("minor")) == (3, 4, 16384, "3")


@pytest.mark.parametrize(
    "value",
    [
        "not json",
        '{"devices":[{"index":"0","capacity":6}],"profiles":{}}',  # no profile
        '{"devices":[{"index":"0","capacity":0}],"profiles":{"1g.6gb":"0"}}',  # no capacity
        '{"devices":[{"index":"0","capacity":true}],"profiles":{"1g.6gb":"0"}}',
        '{"devices":[{"index":0,"capacity":6}],"profiles":{"1g.6gb":"0"}}',  # Go: index is a string
    ],
)
def test_unreadable_drs_registrations(value: str) -> None:
    with pytest.raises(CodecError):
        decode_drs(value, "n")


def test_profile_names() -> None:
    assert [profile_shape(n) for n in ("3g.20gb", " 6G.40GB ", "x.1gb", "2g", "2g.xgb")] == [
        (3, 20), (6, 40), (0, 0), (0, 0), (2, 0),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("family", "limits", "want"),
    [
        (WHOLE_FAMILY, {GCU: "2"}, ("GCU", 2, 100, 100, 100)),
        # HAMi: TestGenerateResourceRequests: by slices, always one share.
        (DRS_FAMILY, {SLICES: "3"}, ("Enflame", 1, 3, 0, 0)),
        # HAMi: TestGenerateResourceRequests_ByMemoryCore.
        (DRS_FAMILY, {MEM: "20480", CORE: "40"}, ("Enflame", 1, 20480, -1, 40)),
        (DRS_FAMILY, {MEM: "20"}, ("Enflame", 1, 20, -1, 0)),
        (DRS_FAMILY, {SLICES: "0", CORE: "1500m"}, ("Enflame", 1, 0, -1, 2)),  # falls to spec
    ],
)
def test_requests(family: Any, limits: dict[str, str], want: tuple[Any, ...]) -> None:
    req = family.container_request(ctr(limits))
    assert req is not None
    assert (req.type, req.nums, req.memreq, req.mem_percentage, req.coresreq) == want


def test_malformed_requests() -> None:
    assert DRS_FAMILY.container_request(ctr({SLICES: "0"})) is None
    assert DRS_FAMILY.container_request(ctr({SLICES: "4294967296"})) is None
    assert WHOLE_FAMILY.container_request(ctr({GCU: "0.5"})) is None
    for family, limits in ((DRS_FAMILY, {SLICES: "0"}), (WHOLE_FAMILY, {GCU: "0.5"})):
        with pytest.raises(RequestError):
            family.container_request(ctr(limits), strict=True)
    assert DRS_FAMILY.container_request(ctr({"nvidia.com/gpu": "1"})) is None


# (name, cards, request, pod annotations, mutex, (uuid, MiB, cores, profile) or reason)
DRS_STEPS: list[tuple[str, list[Card], FamilyRequest, dict[str, str], bool, tuple[str, int, int, str] | str]] = [
    ("HAMi: select profile by slices", drs_cards(), slices(3), {}, False,
     ("node-a-enflame-drs-0", 20480, 50, "3g.20gb")),
    ("HAMi: select profile by memory and cores", drs_cards(), spec(20480, 40), {}, False,
     ("node-a-enflame-drs-0", 20480, 50, "3g.20gb")),
    ("memory in GB when under twice the largest", drs_cards(), spec(7), {}, False,
     ("node-a-enflame-drs-0", 20480, 50, "3g.20gb")),
    ("cores alone pick the smallest with the share", drs_cards(), spec(0, 51), {}, False,
     ("node-a-enflame-drs-0", 40960, 100, "6g.40gb")),
    ("one slice of six: its cores rounded up", drs_cards(), slices(1), {}, False,
     ("node-a-enflame-drs-0", 6144, 17, "1g.6gb")),
    ("HAMi: profile not found", drs_cards(), slices(2), {}, False, "1/1 ModeNotFit"),
    ("no profile holds the memory", drs_cards(), spec(41), {}, False, "1/1 ModeNotFit"),
    ("HAMi: mutex rejects a used device", drs_cards(used={0: (1, 6144, 17)}), slices(3), {}, True,
     "1/1 ExclusiveDeviceAllocateConflict"),
    ("a used device is shared without mutex", drs_cards(used={0: (1, 6144, 17)}), slices(3), {}, False,
     ("node-a-enflame-drs-0", 20480, 50, "3g.20gb")),
    ("HAMi: unhealthy device", drs_cards(healthy=False), slices(3), {}, False, "1/1 CardNotHealth"),
    ("slices exhausted", drs_cards(used={0: (6, 0, 0)}), slices(1), {}, False, "1/1 CardTimeSlicingExhausted"),
    ("memory exhausted", drs_cards(used={0: (2, 30720, 50)}), slices(3), {}, False,
     "1/1 CardInsufficientMemory"),
    ("cores exhausted", drs_cards(used={0: (2, 12288, 60)}), slices(3), {}, False, "1/1 CardInsufficientCore"),
    ("uuid excluded", drs_cards(), slices(1), {"enflame.com/nouse-gpuuuid": "node-a-enflame-drs-0"}, False,
     "1/1 CardUuidMismatch"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "cards", "req", "annos", "mutex", "want"), DRS_STEPS, ids=[s[0] for s in DRS_STEPS]
)
def test_drs_fit(
    name: str, cards: list[Card], req: FamilyRequest, annos: dict[str, str], mutex: bool, want: Any
) -> None:
    got = DRS_FAMILY.fit(
        cards, req, FitPod(annos, frozenset({CardFilter.MUTEX} if mutex else ())), ()
    )
    if isinstance(want, str):
        assert (got.devices, got.reason) == (None, want)
        return
    assert got.devices is not None
    (d,) = got.devices
    assert (d.uuid, d.usedmem, d.usedcores, d.get("profileName")) == want


def test_a_pods_earlier_shares_count_their_slices() -> None:
    # HAMi adds a share's slices to its card's use while fitting the pod's next container;
    # the cards count the earlier share as one task, the family adds the rest.
    first = DRS_FAMILY.fit(drs_cards(), slices(6), FitPod(), ())
    assert first.devices is not None
    after = drs_cards(used={0: (1, 40960, 100)})
    got = DRS_FAMILY.fit(after, slices(1), FitPod(), ((first.devices[0],),))
    assert got.reason == "1/1 CardTimeSlicingExhausted"
    # A share read back from a pod (no profile on the wire) counts one slice, as in HAMi.
    read_back = ContainerDevice("node-a-enflame-drs-0", 40960, 100, "Enflame")
    got = DRS_FAMILY.fit(after, slices(1), FitPod(), ((read_back,),))
    assert got.reason == "1/1 CardInsufficientMemory"


GCU_STEPS = [
    ("HAMi: fit success", gcus(0, 0), 1, ["dev-1"], ""),
    ("HAMi: device already used", gcus(1), 1, None, "1/1 ExclusiveDeviceAllocateConflict"),
    ("HAMi: insufficient devices", gcus(0), 2, None, "1/1 AllocatedCardsInsufficientRequest"),
    ("two of three", gcus(0, 1, 0), 2, ["dev-2", "dev-0"], ""),
    ("unhealthy", gcus(0, healthy=False), 1, None, "1/1 CardNotHealth"),
]


@pytest.mark.parametrize(
    ("name", "cards", "nums", "want", "reason"), GCU_STEPS, ids=[s[0] for s in GCU_STEPS]
)
def test_whole_gcu_fit(
    name: str, cards: list[Card], nums: int, want: list[str] | None, reason: str
) -> None:
    got = WHOLE_FAMILY.fit(cards, FamilyRequest("GCU", nums, 100, 100, 100), FitPod(), ())
    assert got.reason == reason
    assert (None if got.devices is None else [d.uuid for d in got.devices]) == want
    for d in got.devices or ():
        assert (d.usedmem, d.usedcores, d.type) == (100, 100, "GCU")


def test_drs_annotations() -> None:
    # HAMi: TestPatchAnnotations_DRSFields.
    fitted = DRS_FAMILY.fit(drs_cards(), slices(3), FitPod(), ())
    assert fitted.devices is not None
    bind = BindContext(
        now_ns=1_700_000_000_123_456_789,
        containers=({"name": "init"}, {"name": "pod-gcu-example1"}),
    )
    out = DRS_FAMILY.annotations(((), fitted.devices), bind)
    assert out == {
        "hami.io/enflame-vgpu-devices-allocated": ";node-a-enflame-drs-0,Enflame,20480,50:;",
        "enflame.com/gcu-assigned": "false",
        "enflame.com/gcu-assigned-time": "1700000000123456789",
        "enflame.com/gcu-assigned-index": "0",
        "enflame.com/gcu-assigned-id": "0",
        "enflame.com/gcu-assigned-minor": "0",
        "enflame.com/gcu-request-size": "3",
        "assigned-containers": (
            '{"pod-gcu-example1":{"allocated":false,"request":3,"profileID":"1","profileName":"3g.20gb"}}'
        ),
    }
    assert orjson.loads(out["assigned-containers"])["pod-gcu-example1"]["request"] == 3
    assert DRS_FAMILY.annotations(((),)) == {}
    whole = WHOLE_FAMILY.annotations(((ContainerDevice("n-GCU-0", 100, 100, "GCU"),),))
    assert whole == {
        "hami.io/enflame-gcu-devices-to-allocate": "n-GCU-0,GCU,100,100:;",
        "hami.io/enflame-gcu-devices-allocated": "n-GCU-0,GCU,100,100:;",
    }


@pytest.mark.parametrize(
    ("container", "want"),
    [
        (ctr({SLICES: "3"}), Claim(True, requests=((SLICES, "3"),))),
        (ctr({SLICES: "3"}, {SLICES: "3"}), Claim(True)),
        (ctr(None, {SLICES: "2"}), Claim(True, limits=((SLICES, "2"),))),
        (ctr({SLICES: "0"}), Claim(False, error=f"{SLICES} must be greater than 0")),
        # HAMi: TestMutateAdmission_ByMemoryCoreAPI.
        (ctr({MEM: "20480", CORE: "50"}), Claim(True, requests=((MEM, "20480"), (CORE, "50")))),
        (ctr({MEM: "0"}), Claim(False, error=f"{MEM} must be greater than 0")),
        (ctr({CORE: "101"}), Claim(False, error=f"{CORE} must be in range (0,100]")),
        (ctr({"cpu": "1"}), Claim(False)),
    ],
)
def test_drs_claim(container: dict[str, Any], want: Claim) -> None:
    assert DRS_FAMILY.claim(container, {}) == want


def test_whole_gcu_claim() -> None:
    assert WHOLE_FAMILY.claim(ctr({GCU: "1"}), {}) == Claim(True)
    assert WHOLE_FAMILY.claim(ctr(None, {GCU: "1"}), {}) == Claim(False)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 40960), st.integers(0, 100)),
        min_size=1,
        max_size=4,
    ),
    st.one_of(
        st.builds(slices, st.integers(1, 6)),
        st.builds(spec, st.integers(0, 50000), st.integers(0, 100)),
    ),
    st.booleans(),
)
def test_drs_fit_never_exceeds_a_cards_capacity(
    shape: list[tuple[int, int, int]], req: FamilyRequest, mutex: bool
) -> None:
    value = orjson.dumps(
        {
            "devices": [{"index": str(i), "capacity": 6} for i in range(len(shape))],
            "profiles": {"1g.6gb": "0", "2g.12gb": "1", "3g.20gb": "2", "6g.40gb": "3"},
        }
    ).decode()
    cards = drs_cards(value, {i: s for i, s in enumerate(shape)})
    got = DRS_FAMILY.fit(
        cards, req, FitPod(filters=frozenset({CardFilter.MUTEX} if mutex else ())), ()
    )
    for d in got.devices or ():
        c = next(c for c in cards if c.info.id == d.uuid)
        assert c.usage.used < c.info.count
        assert c.usage.usedmem + d.usedmem <= c.info.devmem
        assert c.usage.usedcores + d.usedcores <= c.info.devcore
