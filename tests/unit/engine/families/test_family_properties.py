"""One property over the seven families of issue 31's simple set: whatever the cards' usage
and the container's ask, a fit never hands out a device beyond its split count, memory or
cores (nor the same device twice, nor more devices than asked)."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.engine.families import amd, awsneuron, biren, cambricon, iluvatar, mthreads, vastai
from hami.engine.families.base import Family, FitPod, NodeFacts
from hami.engine.families.metax import MetaxGpu, MetaxSgpu
from hami.engine.model import Card, DeviceInfo, Usage
from hami.engine.policy import CardFilter
from tests.families_samples import SAMPLE_ALLOCATABLE, SAMPLE_NODE

FAMILIES: list[Family] = [
    cambricon.FAMILY,
    mthreads.FAMILY,
    awsneuron.FAMILY,
    amd.FAMILY,
    vastai.FAMILY,
    biren.FAMILY,
    iluvatar.FAMILIES[0],
    MetaxGpu(),
    MetaxSgpu(),
]
LABELS = {"node.kubernetes.io/instance-type": "inf2.48xlarge"}


def registered(family: Family) -> tuple[DeviceInfo, ...]:
    kind = family.wire.type
    facts = NodeFacts("n", SAMPLE_ALLOCATABLE[kind], LABELS)
    infos = family.decode_node(SAMPLE_NODE[kind], facts)
    assert infos
    return infos


def bits(mask: int) -> int:
    return bin(mask).count("1") if mask > 0 else 0


@st.composite
def situation(draw: Any) -> tuple[Family, list[Card], dict[str, Any], bool]:
    family = draw(st.sampled_from(FAMILIES))
    cards = []
    for info in registered(family):
        used = draw(st.integers(0, max(info.count, 0)))
        usedmem = draw(st.integers(0, max(info.devmem, 0))) if used else 0
        if family is awsneuron.FAMILY:  # core masks: HAMi's masks are 1, 2 or 3
            usedcores = draw(st.sampled_from([0, 1, 2, 3])) & info.devcore if used else 0
        else:
            usedcores = draw(st.integers(0, max(info.devcore, 0))) if used else 0
        cards.append(Card(info, Usage(used, usedmem, usedcores), 0.0, draw(st.booleans())))
    names = family.wire.resources
    limits: dict[str, Any] = {names.count: draw(st.integers(1, 5))}
    if names.memory and draw(st.booleans()):
        limits[names.memory] = draw(st.integers(1, 200_000))
    if names.cores and draw(st.booleans()):
        limits[names.cores] = draw(st.integers(1, 150))
    if family is awsneuron.FAMILY and draw(st.booleans()):
        limits = {names.cores: draw(st.sampled_from([1, 2, 4, 8]))}
    return family, cards, {"name": "c", "resources": {"limits": limits}}, draw(st.booleans())


@settings(max_examples=200, deadline=None)
@given(situation())
def test_a_fit_never_exceeds_a_device(
    case: tuple[Family, list[Card], dict[str, Any], bool],
) -> None:
    family, cards, container, mutex = case
    request = family.container_request(container)
    if request is None:
        return
    got = family.fit(cards, request, FitPod({}, frozenset({CardFilter.MUTEX} if mutex else ())), ())
    if got.devices is None:
        assert got.reason
        return
    assert 0 < len(got.devices) <= request.nums
    by_id = {c.info.id: c for c in cards}
    assert len({d.uuid for d in got.devices}) == len(got.devices)
    for d in got.devices:
        card = by_id[d.uuid]
        info, usage = card.info, card.usage
        assert card.healthy
        assert usage.used < info.count
        assert usage.usedmem + d.usedmem <= max(info.devmem, 0)
        if family is awsneuron.FAMILY:
            assert d.usedcores & usage.usedcores == 0 and bits(d.usedcores) <= bits(info.devcore)
        else:
            assert usage.usedcores + d.usedcores <= max(info.devcore, 0)
        if mutex:
            assert usage.used == 0
