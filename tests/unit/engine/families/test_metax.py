"""The MetaX GPU family (HAMi v2.10 pkg/device/metax/device.go): whole cards counted from
the node's capacity, scored by the link annotations its device plugin writes.

Expected values marked "HAMi:" are from HAMi's own device_test.go."""

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.engine.codec import CodecError
from hami.engine.families.base import FamilyRequest, FitPod, NodeFacts, node_score
from hami.engine.families.metax import MetaxGpu, MetaxSgpu
from hami.engine.families.metax.gpu import from_config as gpu_from_config
from hami.engine.model import Card, ContainerDevice, DeviceInfo, PodDevices
from hami.engine.policy import CardFilter, NodePolicy
from hami.engine.requests import LimitError, RequestError
from tests.builders import FAMILIES
from tests.unit.engine.families.metax_cards import card, container

GPU = MetaxGpu()
LOSSES = '{"1":0,"2":110,"3":270,"4":540,"5":580,"6":730,"7":930,"8":1240}'

BINPACK, SPREAD = NodePolicy.BINPACK, NodePolicy.SPREAD


def node(count: str | None = "4", **annotations: str) -> NodeFacts:
    """The family's NodeFacts (not a Node object): MetaX's count capacity and `annotations`."""
    capacity = {} if count is None else {"metax-tech.com/gpu": count}
    return NodeFacts("n1", capacity, annotations=annotations)


def cards(n: int = 4, used: tuple[int, ...] = (), unhealthy: tuple[int, ...] = ()) -> list[Card]:
    infos = GPU.decode_node({}, node(str(n)))
    assert infos is not None
    return [
        card(
            replace(i, health=i.index not in unhealthy),
            used=1 if i.index in used else 0,
            usedmem=65536 if i.index in used else 0,
            usedcores=100 if i.index in used else 0,
        )
        for i in infos
    ]


def whole(n: int) -> FamilyRequest:
    return FamilyRequest("Metax-GPU", n, 0, 100, 100)


# --- registration -------------------------------------------------------------------------


def test_capacity_registers_one_whole_card_per_unit_named_after_the_node() -> None:
    # HAMi: TestGetNodeDevices
    infos = GPU.decode_node({}, node("2"))
    assert infos == (
        DeviceInfo("n1-metax-0", 0, 1, 65536, 100, "Metax-GPU", 0, ""),
        DeviceInfo("n1-metax-1", 1, 1, 65536, 100, "Metax-GPU", 0, ""),
    )


@pytest.mark.parametrize("count", [None, "0", "four", "1.5"])
def test_no_capacity_is_no_registration(count: str | None) -> None:
    assert GPU.decode_node({}, node(count)) is None
    # No annotation registers these cards, and a caller that knows no capacity gets none.
    assert GPU.decode_node({"metax-tech.com/gpu": "4"}) is None


def test_a_huge_capacity_is_refused() -> None:
    with pytest.raises(CodecError):
        GPU.decode_node({}, node("1025"))


# --- requests -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "want"),
    [
        # HAMi: Test_GenerateResourceRequests: all memory (100%) and 100 cores per card.
        ({"limits": {"metax-tech.com/gpu": "1"}}, whole(1)),
        ({"limits": {"metax-tech.com/gpu": 2}}, whole(2)),
        ({"requests": {"metax-tech.com/gpu": "3"}}, whole(3)),  # requests are read too
        ({"limits": {"metax-tech.com/gpu": "0"}}, None),
        ({"limits": {"nvidia.com/gpu": "1"}}, None),
        ({"limits": {"metax-tech.com/gpu": "1.5"}}, None),  # HAMi: AsInt64 fails, no ask
    ],
)
def test_request(resources: dict[str, dict[str, object]], want: FamilyRequest | None) -> None:
    assert GPU.container_request({"name": "c", "resources": resources}) == want


def test_malformed_request_is_an_error_when_strict() -> None:
    with pytest.raises(RequestError, match=r"metax-tech\.com/gpu"):
        GPU.container_request(container({"metax-tech.com/gpu": "1.5"}), strict=True)
    with pytest.raises(LimitError):
        GPU.container_request(container({"metax-tech.com/gpu": "65"}))


def test_configured_resource_name() -> None:
    gpu = gpu_from_config({"resourceCountName": "example.com/mx"})
    assert gpu.wire.resources.count == "example.com/mx"
    assert gpu.container_request(container({"example.com/mx": "1"})) == whole(1)
    assert gpu.container_request(container({"metax-tech.com/gpu": "1"})) is None


# --- fit ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nums", "used", "unhealthy", "want", "reason"),
    [
        (1, (), (), ["n1-metax-3"], ""),  # from the tail
        (2, (), (), ["n1-metax-3", "n1-metax-2"], ""),
        (2, (3,), (), ["n1-metax-2", "n1-metax-1"], ""),  # a held card is passed over
        (4, (0, 1, 2, 3), (), None, "4/4 CardTimeSlicingExhausted"),
        (
            3,
            (0, 1),
            (),
            None,
            "2/4 AllocatedCardsInsufficientRequest, 2/4 CardTimeSlicingExhausted",
        ),
        (1, (3,), (0, 1, 2), None, "1/4 CardTimeSlicingExhausted, 3/4 CardNotHealth"),
    ],
)
def test_fit(
    nums: int,
    used: tuple[int, ...],
    unhealthy: tuple[int, ...],
    want: list[str] | None,
    reason: str,
) -> None:
    fit = GPU.fit(cards(4, used, unhealthy), whole(nums), FitPod(), ())
    if want is None:
        assert fit.devices is None
    else:
        assert fit.devices == tuple(ContainerDevice(u, 65536, 100, "Metax-GPU") for u in want)
    assert fit.reason == reason


def test_a_second_container_never_fits_once_the_first_took_a_card() -> None:
    # HAMi: Test_CustomFilterRule: only the card an earlier container holds may be given,
    # and it is held whole. HAMi's bug, kept.
    taken = ((ContainerDevice("n1-metax-3", 65536, 100, "Metax-GPU"),),)
    fit = GPU.fit(cards(4, used=(3,)), whole(1), FitPod(), taken)
    assert fit.devices is None
    assert fit.reason == "1/4 CardTimeSlicingExhausted, 3/4 CardNotFoundCustomFilterRule"


# --- score --------------------------------------------------------------------------------

TWO = (
    (ContainerDevice("n1-metax-3", 65536, 100, "Metax-GPU"),),
    (ContainerDevice("n1-metax-2", 65536, 100, "Metax-GPU"),),
)


@pytest.mark.parametrize(
    ("annotations", "devices", "binpack", "want"),
    [
        # HAMi: Test_ScoreNode: 2000 less the loss for the cards taken (binpack)...
        ({"metax-tech.com/gpu.topology.losses": '{"1":100,"2":200}'}, TWO, True, 1800.0),
        # ... or less the link score (spread).
        ({"metax-tech.com/gpu.topology.scores": '{"1":100,"2":200}'}, TWO[:1], False, 1900.0),
        # HAMi: TestParseMetaxAnnos: 4 cards over two containers read the "4" entry.
        ({"metax-tech.com/gpu.topology.losses": LOSSES}, TWO + TWO, True, 2000.0 - 540),
        # The other policy's annotation is not read.
        ({"metax-tech.com/gpu.topology.scores": '{"2":10}'}, TWO, True, 0.0),
        ({}, TWO, False, 0.0),
        # Unreadable, or no entry for the count: HAMi reads 0.
        ({"metax-tech.com/gpu.topology.losses": "not json"}, TWO, True, 2000.0),
        ({"metax-tech.com/gpu.topology.losses": '{"x":1,"2":5}'}, TWO, True, 2000.0),
        ({"metax-tech.com/gpu.topology.losses": '{"1":5}'}, TWO, True, 2000.0),
        # A pod that took none of these cards still scores the 0-card entry (HAMi's quirk).
        ({"metax-tech.com/gpu.topology.losses": '{"0":7}'}, ((),), True, 1993.0),
    ],
)
def test_score(
    annotations: dict[str, str], devices: PodDevices, binpack: bool, want: float
) -> None:
    facts = NodeFacts("n1", {"metax-tech.com/gpu": "4"}, annotations=annotations)
    policy = BINPACK if binpack else SPREAD
    assert node_score(GPU, cards(), devices, FitPod(), facts, policy) == want


# --- annotations, claim, registry ---------------------------------------------------------


def test_annotations_written_for_the_device_plugin() -> None:
    text = "n1-metax-3,Metax-GPU,65536,100:;n1-metax-2,Metax-GPU,65536,100:;"
    assert GPU.annotations(TWO) == {
        "hami.io/metax-gpu-devices-to-allocate": text,
        "hami.io/metax-gpu-devices-allocated": text,
    }
    assert GPU.annotations(((), ())) == {}
    assert GPU.wire.lock_name == ""  # HAMi takes no node lock for this type


def test_claimed_when_the_count_is_a_limit() -> None:
    # HAMi: Test_MutateAdmission
    assert GPU.claim(container({"metax-tech.com/gpu": "1"}), {}).claimed
    assert not GPU.claim(container(requests={"metax-tech.com/gpu": "1"}), {}).claimed
    assert not GPU.claim(container({"nvidia.com/gpu": "1"}), {}).claimed


def test_registered_in_hamis_order() -> None:
    types = [f.wire.type for f in FAMILIES.members]
    assert types.index("Metax-GPU") + 1 == types.index("Metax-SGPU")
    assert isinstance(FAMILIES.by_type()["Metax-SGPU"], MetaxSgpu)
    names = FAMILIES.other_resource_names()
    for name in ("metax-tech.com/gpu", "metax-tech.com/sgpu", "metax-tech.com/vmemory"):
        assert name in names


def test_the_sample_registration_reads() -> None:
    from tests.families_samples import SAMPLE_ALLOCATABLE, SAMPLE_NODE

    facts = NodeFacts("n1", SAMPLE_ALLOCATABLE["Metax-GPU"], annotations=SAMPLE_NODE["Metax-GPU"])
    infos = GPU.decode_node(SAMPLE_NODE["Metax-GPU"], facts)
    assert infos is not None and len(infos) == 4
    assert node_score(GPU, cards(), TWO, FitPod(), facts, BINPACK) == 2000.0


usage = st.tuples(st.integers(0, 1), st.integers(0, 65536), st.integers(0, 100))


@given(st.lists(usage, min_size=1, max_size=8), st.integers(1, 4), st.booleans())
def test_a_fit_never_takes_a_card_beyond_its_capacity(
    usages: list[tuple[int, int, int]], nums: int, mutex: bool
) -> None:
    # Usage drawn apart from what a whole card takes, so each check stands on its own.
    infos = GPU.decode_node({}, node(str(len(usages))))
    assert infos is not None
    node_cards = [card(i, *u) for i, u in zip(infos, usages, strict=True)]
    fit = GPU.fit(
        node_cards, whole(nums), FitPod(filters=frozenset({CardFilter.MUTEX} if mutex else ())), ()
    )
    if fit.devices is None:
        assert fit.reason
        return
    by_id = {c.info.id: c for c in node_cards}
    assert len({d.uuid for d in fit.devices}) == len(fit.devices) == nums
    for d in fit.devices:
        c = by_id[d.uuid]
        assert c.usage.used < c.info.count
        assert c.usage.usedmem + d.usedmem <= c.info.devmem
        assert c.usage.usedcores + d.usedcores <= c.info.devcore


def test_wire_names_stay_in_the_package() -> None:
    root = Path(__file__).resolve().parents[4] / "hami"
    package = root / "engine" / "families" / "metax"
    names = {"metax-tech.com/gpu.topology.losses", "metax-tech.com/gpu.topology.scores"}
    for family in (GPU, MetaxSgpu()):
        w = family.wire
        names |= {
            *w.resources.all(),
            w.register_annotation,
            w.to_allocate_annotation,
            w.allocated_annotation,
            *w.pod_annotations(),
        }
    names.discard("")
    for path in root.rglob("*.py"):
        if package in path.parents or path.name == "registry.py":
            continue
        text = path.read_text()
        for name in names:
            assert name not in text, f"{name} appears in {path}"


def test_node_score_falls_back_to_score_node() -> None:
    # A family that reads neither the pod nor the node is scored by Family.score_node.
    class Plain:
        def score_node(self, cards: object, devices: object, policy: NodePolicy) -> float:
            return 7.0 if policy is BINPACK else -7.0

    plain: Any = Plain()
    assert node_score(plain, [], (), FitPod(), NodeFacts("n1"), SPREAD) == -7.0
    assert node_score(GPU, [], TWO, FitPod(), NodeFacts("n1"), BINPACK) == 0.0  # no annotation
