"""Vastai behind the seam: steps from HAMi v2.10's pkg/device/vastai (device.go and its tests)."""

import pytest

from hami.engine.codec import CodecError
from hami.engine.families import vastai
from hami.engine.families.vastai import best_combination
from hami.engine.model import Card, ContainerDevice, DeviceInfo
from hami.engine.policy import NodePolicy
from tests.unit.engine.families.kit import Step, card, check, ctr

F = vastai.FAMILY
VA = "vastaitech.com/va"
REG_KEY = "hami.io/node-va-register"

BINPACK, SPREAD = NodePolicy.BINPACK, NodePolicy.SPREAD


def die(i: int, aic: str, used: int = 0, count: int = 1, healthy: bool = True) -> Card:
    custom = (("AIC", aic), ("DeviceStrategy", "die"))
    info = DeviceInfo(f"die-{i}", i, count, 0, 100, "Vastai", custom=custom)
    return card(info, used=used, healthy=healthy)


def va(i: int, used: int = 0, count: int = 1) -> Card:
    return card(DeviceInfo(f"va-{i}", i, count, 0, 100, "Vastai"), used=used)


def test_decode() -> None:
    # HAMi's Test_GetNodeDevices registration, and a die-mode one with custominfo.
    infos = F.decode_node(
        {
            REG_KEY: '[{"id":"7-0","count":1,"devmem":32768,"type":"Vastai","health":true,"devicepairscore":{}}]'
        }
    )
    assert infos == (DeviceInfo("7-0", 0, 1, 32768, 100, "Vastai"),)
    dies = F.decode_node(
        {
            REG_KEY: '[{"id":"d0","count":1,"type":"Vastai","health":true,'
            '"custominfo":{"DeviceStrategy":"die","AIC":"0","Other":3}}]'
        }
    )
    assert dies is not None and dies[0].custom == (("AIC", "0"), ("DeviceStrategy", "die"))
    assert F.decode_node({REG_KEY: "[]"}) == ()
    for bad in (":", ""):  # HAMi's test: neither is a JSON list
        with pytest.raises(CodecError):
            F.decode_node({REG_KEY: bad})


def test_requests() -> None:
    got = F.container_request(ctr({VA: 2}))
    assert got is not None and (got.nums, got.memreq, got.mem_percentage, got.coresreq) == (
        2,
        0,
        100,
        0,
    )
    assert F.container_request(ctr(None, {VA: 1})) is not None
    assert F.container_request(ctr({VA: 0})) is None
    assert F.claim(ctr({VA: 1}), {}).claimed
    assert not F.claim(ctr(None, {VA: 1}), {}).claimed


STEPS = [
    Step("plain: one card", [va(0), va(1)], {VA: 1}, (("va-1", 0, 0),)),
    Step("plain: HAMi's exhausted card", [va(0, used=1)], {VA: 1}, "1/1 CardTimeSlicingExhausted"),
    Step("plain: too few", [va(0)], {VA: 2}, "1/1 AllocatedCardsInsufficientRequest"),
    Step(
        "plain: HAMi's mutex",
        [va(0, used=1, count=2)],
        {VA: 1},
        "1/1 ExclusiveDeviceAllocateConflict",
        mutex=True,
    ),
    Step("plain: shared without mutex", [va(0, used=1, count=2)], {VA: 1}, (("va-0", 0, 0),)),
    Step(
        "plain: uuid",
        [va(0), va(1)],
        {VA: 1},
        (("va-0", 0, 0),),
        annotations={"vastaitech.com/use-gpuuuid": "va-0"},
    ),
    Step(
        "plain: nouse uuid",
        [va(0), va(1)],
        {VA: 1},
        "2/2 CardUuidMismatch",
        annotations={"vastaitech.com/nouse-gpuuuid": "va-0,va-1"},
    ),
    Step(
        "die: HAMi's mutex keeps idle dies of a used card out",
        [die(0, "1", used=1, count=2), die(1, "1"), die(2, "2")],
        {VA: 1},
        (("die-2", 0, 0),),
        mutex=True,
    ),
    Step(
        "die: HAMi's mutex, every die on the used card",
        [die(0, "1", used=1, count=2), die(1, "1")],
        {VA: 1},
        "2/2 ExclusiveDeviceAllocateConflict",
        mutex=True,
    ),
    Step(
        "die: without mutex a sibling die is fine",
        [die(0, "1", used=1), die(1, "1")],
        {VA: 1},
        (("die-1", 0, 0),),
    ),
    Step(
        "die: one of many is the first passing from the tail",
        [die(0, "1"), die(1, "2"), die(2, "2")],
        {VA: 1},
        (("die-2", 0, 0),),
    ),
    Step(
        "die: two from the card holding most passing dies",
        [die(0, "1"), die(1, "2"), die(2, "2"), die(3, "1"), die(4, "1")],
        {VA: 2},
        (("die-4", 0, 0), ("die-3", 0, 0)),
    ),
    Step(
        "die: three spill to the next card",
        [die(0, "2"), die(1, "2"), die(2, "1"), die(3, "1")],
        {VA: 3},
        (("die-3", 0, 0), ("die-2", 0, 0), ("die-1", 0, 0)),
    ),
    Step(
        "die: exactly as many as asked, in walk order",
        [die(0, "1"), die(1, "2")],
        {VA: 2},
        (("die-1", 0, 0), ("die-0", 0, 0)),
    ),
    Step(
        "die: too few",
        [die(0, "1", used=1), die(1, "2"), die(2, "2", healthy=False)],
        {VA: 2},
        "1/3 AllocatedCardsInsufficientRequest, 1/3 CardNotHealth, 1/3 CardTimeSlicingExhausted",
    ),
]


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_fit(step: Step) -> None:
    check(F, step)


def dev(uuid: str) -> ContainerDevice:
    return ContainerDevice(uuid, 0, 0, "Vastai")


@pytest.mark.parametrize(
    ("nums", "aics", "want"),
    [  # HAMi's TestComputeBestCombination
        (2, "111", "12"),
        (3, "111223", "123"),
        (4, "111223", "1234"),
        (5, "112", "123"),
    ],
)
def test_best_combination(nums: int, aics: str, want: str) -> None:
    devices = [dev(str(i + 1)) for i in range(len(aics))]
    got = best_combination(nums, devices, list(aics))
    assert "".join(d.uuid for d in got) == want


def test_score_node() -> None:
    cards = [die(0, "1"), die(1, "1"), die(2, "2"), va(3)]
    one = ((dev("die-0"), dev("die-1")),)
    split = ((dev("die-0"), dev("die-2")),)
    assert F.score_node(cards, one, BINPACK) == 1.0
    assert F.score_node(cards, split, BINPACK) == 0.5
    assert F.score_node(cards, one + split, BINPACK) == 1.5
    assert F.score_node(cards, ((dev("va-3"),),), BINPACK) == 0.0  # no custominfo: 0 for the node
    assert F.score_node(cards, (*one, (dev("va-3"),)), BINPACK) == 0.0


def test_annotations() -> None:
    text = "die-1,Vastai,0,0:;"
    assert F.annotations(((dev("die-1"),),)) == {
        "hami.io/Vastai-devices-to-allocate": text,
        "hami.io/Vastai-devices-allocated": text,
    }


def test_sample_registration_decodes() -> None:
    from tests.families_samples import SAMPLE_ALLOCATABLE, SAMPLE_NODE

    infos = F.decode_node(SAMPLE_NODE["Vastai"])
    assert infos is not None and len(infos) == 4
    assert sum(d.count for d in infos) == int(SAMPLE_ALLOCATABLE["Vastai"][VA])
