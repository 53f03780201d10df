"""Biren behind the seam: steps from HAMi v2.10's pkg/device/biren (device.go and its tests)."""

import pytest

from hami.engine.codec import CodecError
from hami.engine.families import biren
from hami.engine.model import Card, ContainerDevice, DeviceInfo
from hami.engine.requests import RequestError
from tests.unit.engine.families.kit import Ask, Step, asked, card, check, ctr

F = biren.FAMILY
GPU = "birentech.com/gpu"
# As Biren's device plugin registers cards (JSON, HAMi's DeviceInfo field names).
REG = (
    '[{"id":"br-0","index":0,"count":4,"devmem":65536,"devcore":0,"type":"Biren","health":true},'
    '{"id":"br-1","index":1,"count":4,"devmem":65536,"type":"Biren","health":true},'
    '{"id":"br-2","index":2,"count":4,"devmem":65536,"type":"Biren","health":false}]'
)


def cards(*used: int) -> list[Card]:
    infos = F.decode_node({"hami.io/node-biren-register": REG})
    assert infos is not None
    return [card(i, used=u) for i, u in zip(infos, used, strict=False)]


def test_decode_sets_cores_to_100_and_reads_json_only() -> None:
    infos = F.decode_node({"hami.io/node-biren-register": REG})
    assert infos is not None
    assert [(d.id, d.count, d.devmem, d.devcore, d.health) for d in infos] == [
        ("br-0", 4, 65536, 100, True),
        ("br-1", 4, 65536, 100, True),
        ("br-2", 4, 65536, 100, False),
    ]
    assert F.decode_node({}) is None
    with pytest.raises(CodecError):  # HAMi's UnMarshalNodeDevices reads JSON alone
        F.decode_node({"hami.io/node-biren-register": "br-0,4,65536,100,Biren,0,true:"})


@pytest.mark.parametrize(
    ("limits", "requests", "want"),
    [
        ({GPU: 2}, None, (2, 0, 100, 0)),
        (None, {GPU: 1}, (1, 0, 100, 0)),  # requests are read when limits name none
        ({GPU: 0}, None, None),
        ({"nvidia.com/gpu": 1}, None, None),
        ({GPU: "1.5"}, None, None),  # not a whole number: no ask (lenient)
    ],
)
def test_requests(
    limits: dict[str, object] | None, requests: dict[str, object] | None, want: Ask
) -> None:
    assert asked(F, limits, requests) == want


def test_malformed_count_strict() -> None:
    with pytest.raises(RequestError):
        F.container_request(ctr({GPU: "1.5"}), strict=True)


# Cards arrive in HAMi's sorted order, the walk starts at the tail.
STEPS = [
    Step("one device from the tail", cards(0, 0), {GPU: 1}, (("br-1", 0, 0),)),
    Step("two devices", cards(0, 0), {GPU: 2}, (("br-1", 0, 0), ("br-0", 0, 0))),
    Step("unhealthy card skipped", cards(0, 0, 0), {GPU: 1}, (("br-1", 0, 0),)),
    Step("all slots used", cards(4, 4), {GPU: 1}, "2/2 CardTimeSlicingExhausted"),
    Step("a shared card still takes a task", cards(3, 4), {GPU: 1}, (("br-0", 0, 0),)),
    Step(
        "too few",
        cards(0, 4),
        {GPU: 2},
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted",
    ),
    Step(
        "unhealthy and exhausted",
        cards(4, 4, 0),
        {GPU: 1},
        "1/3 CardNotHealth, 2/3 CardTimeSlicingExhausted",
    ),
    Step("mutex skips a used card", cards(0, 1), {GPU: 1}, (("br-0", 0, 0),), mutex=True),
    Step(
        "mutex, all used", cards(1, 1), {GPU: 1}, "2/2 ExclusiveDeviceAllocateConflict", mutex=True
    ),
    Step(
        "use-uuid",
        cards(0, 0),
        {GPU: 1},
        (("br-0", 0, 0),),
        annotations={"birentech.com/use-gpuuuid": "br-0"},
    ),
    Step(
        "nouse-uuid",
        cards(0, 0),
        {GPU: 1},
        (("br-0", 0, 0),),
        annotations={"birentech.com/nouse-gpuuuid": "br-1"},
    ),
    Step(
        "use-uuid of no card",
        cards(0, 0),
        {GPU: 1},
        "2/2 CardUuidMismatch",
        annotations={"birentech.com/use-gpuuuid": "br-9"},
    ),
    Step(
        "type annotations are not read",
        cards(0, 0),
        {GPU: 1},
        (("br-1", 0, 0),),
        annotations={"birentech.com/use-biren": "nothing-like-it"},
    ),
    Step(
        "memory never counts",
        [card(DeviceInfo("x", 0, 2, 10, 100, "Biren"), usedmem=10)],
        {GPU: 1},
        (("x", 0, 0),),
    ),
]


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_fit(step: Step) -> None:
    check(F, step)


def test_annotations_and_claim() -> None:
    devices = ((), (ContainerDevice("br-1", 0, 0, "Biren"),))
    text = ";br-1,Biren,0,0:;"
    assert F.annotations(devices) == {
        "hami.io/Biren-devices-to-allocate": text,
        "hami.io/Biren-devices-allocated": text,
    }
    assert F.annotations(((),)) == {}
    assert F.claim(ctr({GPU: 1}), {}).claimed
    assert not F.claim(ctr(None, {GPU: 1}), {}).claimed  # HAMi claims by the limit alone


def test_config_renames_the_resource() -> None:
    f = biren.from_config({"resourceCountName": "example.com/br"})
    assert f.wire.resources.count == "example.com/br"
    assert f.container_request(ctr({"example.com/br": 1})) is not None


def test_sample_registration_decodes() -> None:
    from tests.families_samples import SAMPLE_ALLOCATABLE, SAMPLE_NODE

    infos = F.decode_node(SAMPLE_NODE["Biren"])
    assert infos is not None and len(infos) == 2
    assert sum(d.count for d in infos) == int(SAMPLE_ALLOCATABLE["Biren"][GPU])
