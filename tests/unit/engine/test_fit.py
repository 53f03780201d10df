"""Fit: HAMi's checks in HAMi's order, its reason strings, and card choice per policy."""

import pytest

from hami.engine import reasons as r
from hami.engine.decide import schedule
from hami.engine.model import ContainerRequest, DeviceInfo, PodRequest, Usage
from hami.engine.policy import pod_options
from hami.engine.state import build_node
from tests.builders import FAMILIES
from tests.unit.engine.conftest import LAB_UUIDS, t4


def one(nums: int = 1, mem: int = 1000, pct: int = 101, cores: int = 0) -> PodRequest:
    return PodRequest(app=(ContainerRequest(nums, mem, pct, cores),))


def lab_node(usage: dict[str, Usage] | None = None, **kw: object) -> dict[str, object]:
    devices = [t4(u, i) for i, u in enumerate(LAB_UUIDS)]
    return {"n": build_node("n", devices, usage, **kw, registry=FAMILIES)}  # type: ignore[arg-type]


def place(cluster: dict[str, object], request: PodRequest, **ann: str) -> tuple[str | None, str]:
    d = schedule(cluster, request, pod_options(ann), families=FAMILIES)  # type: ignore[arg-type]
    return d.allocation, d.failed.get("n", "")


BUSY = Usage(1, 1000, 0)
A, B, C, D = LAB_UUIDS


@pytest.mark.parametrize(
    ("usage", "request_", "annotations", "reason"),
    [
        (
            {u: BUSY for u in LAB_UUIDS},
            one(),
            {"hami.io/gpu-scheduler-policy": "mutex"},
            "4/4 ExclusiveDeviceAllocateConflict",
        ),
        ({u: Usage(10, 1000, 0) for u in LAB_UUIDS}, one(), {}, "4/4 CardTimeSlicingExhausted"),
        ({u: Usage(1, 15000, 0) for u in LAB_UUIDS}, one(), {}, "4/4 CardInsufficientMemory"),
        ({u: Usage(1, 1000, 90) for u in LAB_UUIDS}, one(cores=20), {}, "4/4 CardInsufficientCore"),
        (
            {u: BUSY for u in LAB_UUIDS},
            one(mem=0, pct=100, cores=100),
            {},
            "4/4 CardInsufficientMemory",
        ),
        (
            {u: Usage(1, 100, 0) for u in LAB_UUIDS},
            one(cores=100),
            {},
            "4/4 ExclusiveDeviceAllocateConflict",
        ),
        (
            {u: Usage(1, 100, 100) for u in LAB_UUIDS},
            one(cores=0),
            {},
            "4/4 CardComputeUnitsExhausted",
        ),
        ({}, one(nums=5), {}, r.NODE_INSUFFICIENT_DEVICE),
        ({}, one(), {"nvidia.com/use-gputype": "A100"}, "4/4 CardTypeMismatch"),
        ({}, one(), {"nvidia.com/nouse-gputype": "t4"}, "4/4 CardTypeMismatch"),
        # HAMi's CheckType: a list that names no type matches no card; so does an empty mode.
        ({}, one(), {"nvidia.com/use-gputype": ","}, "4/4 CardTypeMismatch"),
        ({}, one(), {"nvidia.com/use-gputype": " , "}, "4/4 CardTypeMismatch"),
        ({}, one(), {"nvidia.com/vgpu-mode": ""}, "4/4 CardTypeMismatch"),
        ({}, one(), {"nvidia.com/use-gpuuuid": "GPU-none"}, "4/4 CardUuidMismatch"),
        ({}, one(), {"nvidia.com/nouse-gpuuuid": ",".join(LAB_UUIDS)}, "4/4 CardUuidMismatch"),
        # several reasons: sorted strings joined with ", "
        (
            {A: Usage(10, 0, 0), B: Usage(1, 15000, 0)},
            one(nums=3),
            {},
            "1/4 CardInsufficientMemory, 1/4 CardTimeSlicingExhausted, 2/4 AllocatedCardsInsufficientRequest",
        ),
    ],
)
def test_rejection_reasons(
    usage: dict[str, Usage], request_: PodRequest, annotations: dict[str, str], reason: str
) -> None:
    allocation, failed = place(lab_node(usage), request_, **annotations)
    assert allocation is None
    assert failed == reason


def test_unhealthy_and_cordoned_cards() -> None:
    devices = [t4(A, 0, health=False), t4(B, 1), t4(C, 2), t4(D, 3)]
    node = build_node("n", devices, cordoned=frozenset({B, C, D}), registry=FAMILIES)
    d = schedule({"n": node}, one(), pod_options({}), families=FAMILIES)
    assert d.failed["n"] == "1/4 CardNotHealth, 3/4 CardCordoned"


def test_unknown_candidate_is_unregistered() -> None:
    d = schedule(lab_node(), one(), pod_options({}), ["n", "ghost"], families=FAMILIES)  # type: ignore[arg-type]
    assert d.node == "n"
    assert d.failed == {"ghost": r.NODE_UNREGISTERED}


@pytest.mark.parametrize(
    ("policy", "usage", "expected"),
    [
        ("spread", {}, D),  # all tie: highest index
        ("spread", {D: BUSY}, C),
        ("binpack", {D: BUSY, C: BUSY}, D),
        ("binpack", {C: Usage(2, 2000, 0), D: BUSY}, C),
        ("mutex", {C: BUSY, D: BUSY}, B),
        ("mutex,binpack", {D: BUSY}, C),
        ("mutex,spread", {D: BUSY}, C),
        ("binpack,spread", {B: BUSY}, B),
        ("numa", {}, D),
    ],
)
def test_card_choice(policy: str, usage: dict[str, Usage], expected: str) -> None:
    allocation, _ = place(lab_node(usage), one(), **{"hami.io/gpu-scheduler-policy": policy})
    assert allocation == f"{expected},NVIDIA,1000,0:;"


def test_numa_key_orders_before_score_in_a_chain() -> None:
    devices = [t4(A, 0, numa=1), t4(B, 1, numa=1), t4(C, 2, numa=0), t4(D, 3, numa=0)]
    cluster = {"n": build_node("n", devices, {C: BUSY}, registry=FAMILIES)}
    # numa ascending puts NUMA 1 last (preferred); binpack then ranks within it.
    d = schedule(
        cluster,
        one(),
        pod_options({"hami.io/gpu-scheduler-policy": "numa,binpack"}),
        families=FAMILIES,
    )
    assert d.allocation == f"{B},NVIDIA,1000,0:;"
    d = schedule(
        cluster,
        one(),
        pod_options({"hami.io/gpu-scheduler-policy": "binpack,numa"}),
        families=FAMILIES,
    )
    assert d.allocation == f"{C},NVIDIA,1000,0:;"


def test_numa_bind_takes_all_cards_from_one_numa_node() -> None:
    devices = [t4(A, 0, numa=0), t4(B, 1, numa=0), t4(C, 2, numa=1), t4(D, 3, numa=1)]
    cluster = {"n": build_node("n", devices, {D: Usage(10, 0, 0)}, registry=FAMILIES)}
    d = schedule(
        cluster, one(nums=2), pod_options({"nvidia.com/numa-bind": "true"}), families=FAMILIES
    )
    assert d.allocation is not None
    assert {x.uuid for x in d.devices[0]} == {A, B}  # type: ignore[index]
    full = {
        "n": build_node("n", devices, {B: Usage(10, 0, 0), D: Usage(10, 0, 0)}, registry=FAMILIES)
    }
    d = schedule(
        full, one(nums=2), pod_options({"nvidia.com/numa-bind": "true"}), families=FAMILIES
    )
    assert (
        d.failed["n"]
        == "1/4 AllocatedCardsInsufficientRequest, 1/4 NumaNotFit, 2/4 CardTimeSlicingExhausted"
    )


def test_topology_aware_picks_best_linked_pair_and_worst_linked_single() -> None:
    links = {
        A: {B: 100, C: 10, D: 10},
        B: {A: 100, C: 10, D: 10},
        C: {A: 10, B: 10, D: 50},
        D: {A: 10, B: 10, C: 50},
    }
    cluster = {
        "n": build_node(
            "n", [t4(u, i) for i, u in enumerate(LAB_UUIDS)], links=links, registry=FAMILIES
        )
    }
    opts = pod_options({"hami.io/gpu-scheduler-policy": "topology-aware"})
    pair = schedule(cluster, one(nums=2), opts, families=FAMILIES)
    assert {x.uuid for x in pair.devices[0]} == {A, B}  # type: ignore[index]
    single = schedule(cluster, one(), opts, families=FAMILIES)
    assert single.devices[0][0].uuid in {C, D}  # type: ignore[index]


def test_percentage_takes_share_of_each_card() -> None:
    cluster = {
        "n": build_node("n", [DeviceInfo("G", 0, 10, 40000, 100, "NVIDIA A100")], registry=FAMILIES)
    }
    d = schedule(cluster, one(mem=0, pct=25), pod_options({}), families=FAMILIES)
    assert d.allocation == "G,NVIDIA,10000,0:;"


def test_init_containers_fit_alone_and_app_containers_together() -> None:
    cluster = {
        "n": build_node("n", [DeviceInfo("G", 0, 10, 10000, 100, "NVIDIA-T4")], registry=FAMILIES)
    }
    req = PodRequest(
        init=(ContainerRequest(1, 8000),),
        app=(ContainerRequest(1, 5000), ContainerRequest(1, 5000)),
    )
    d = schedule(cluster, req, pod_options({}), families=FAMILIES)
    assert d.allocation == "G,NVIDIA,8000,0:;G,NVIDIA,5000,0:;G,NVIDIA,5000,0:;"
    too_much = PodRequest(app=(ContainerRequest(1, 6000), ContainerRequest(1, 6000)))
    assert (
        schedule(cluster, too_much, pod_options({}), families=FAMILIES).failed["n"]
        == "1/1 CardInsufficientMemory"
    )


def test_node_policy_binpack_prefers_busy_node_and_spread_idle_names_break_ties() -> None:
    devs = [t4(f"GPU-{n}", 0) for n in "xyz"]
    cluster = {
        "a": build_node("a", [devs[0]], registry=FAMILIES),
        "b": build_node("b", [devs[1]], {"GPU-y": BUSY}, registry=FAMILIES),
        "c": build_node("c", [devs[2]], registry=FAMILIES),
    }
    assert schedule(cluster, one(), pod_options({}), families=FAMILIES).node == "b"
    assert (
        schedule(
            cluster,
            one(),
            pod_options({"hami.io/node-scheduler-policy": "spread"}),
            families=FAMILIES,
        ).node
        == "a"
    )


def test_weights_change_card_scores() -> None:
    cluster = lab_node({A: Usage(1, 0, 10), B: Usage(3, 0, 0)})
    cores_only = "slot=0,core=1,memory=0"
    alloc, _ = place(
        cluster,
        one(),
        **{"hami.io/gpu-scheduler-policy": "binpack", "hami.io/device-scoring-weights": cores_only},
    )
    assert alloc == f"{A},NVIDIA,1000,0:;"
    alloc, _ = place(cluster, one(), **{"hami.io/gpu-scheduler-policy": "binpack"})
    assert alloc == f"{B},NVIDIA,1000,0:;"


def test_remembered_fits_never_outlive_the_node_state() -> None:
    cluster = lab_node()
    opts = pod_options({"hami.io/gpu-scheduler-policy": "mutex"})
    first = schedule(cluster, one(), opts, families=FAMILIES)  # type: ignore[arg-type]
    assert first.allocation == f"{D},NVIDIA,1000,0:;"
    assert schedule(cluster, one(), opts, families=FAMILIES) == first  # type: ignore[arg-type]  # remembered
    busy = lab_node({D: BUSY})  # a new state, as the cache builds on every usage change
    assert schedule(busy, one(), opts, families=FAMILIES).allocation == f"{C},NVIDIA,1000,0:;"  # type: ignore[arg-type]


def two(mem: int = 1000, cores: int = 0) -> PodRequest:
    c = ContainerRequest(1, mem, 101, cores)
    return PodRequest(app=(c, c))


# Two app containers of 1 card each. HAMi sorts the same card list in place for each container,
# with no index key in a single policy's comparator and a stable sort (Go's insertion sort for
# up to 12 cards): a card that ties with others after the first container took it keeps its
# place at the tail and is taken again. Chains end on the index, so they never carry order.
@pytest.mark.parametrize(
    ("usage", "policy", "expected"),
    [
        # A idle, B holds 1000 MiB: the first container takes A; then A and B tie (1.651042),
        # A stays last and takes the second container too (the side-by-side case).
        pytest.param({B: BUSY, C: Usage(2, 2000, 0), D: Usage(2, 2000, 0)}, "spread", (A, A)),
        pytest.param({B: BUSY, C: BUSY, D: BUSY}, "spread", (A, A), id="spread-three-tied"),
        # Nothing ties: the second container moves to the next idle card.
        pytest.param({C: BUSY, D: BUSY}, "spread", (B, A), id="spread-two-idle"),
        # binpack takes the busiest card; it only gets busier.
        pytest.param({B: BUSY}, "binpack", (B, B), id="binpack"),
        # A chain's last key is the index: after the first container, B ties with A on every
        # key and wins on its index, as in HAMi.
        pytest.param({B: BUSY, C: Usage(2, 2000, 0), D: Usage(2, 2000, 0)}, "spread,numa", (A, B)),
    ],
)
def test_second_container_keeps_the_order_the_first_left(
    usage: dict[str, Usage], policy: str, expected: tuple[str, str]
) -> None:
    d = schedule(
        lab_node(usage),  # type: ignore[arg-type]
        two(),
        pod_options({"hami.io/gpu-scheduler-policy": policy}),
        families=FAMILIES,
    )
    assert d.devices is not None
    assert tuple(c[0].uuid for c in d.devices) == expected


def test_init_containers_each_sort_a_fresh_copy() -> None:
    # HAMi sorts a copy of the node's list for every init container: nothing carries over, and
    # the init container does not count against the app container either.
    c = ContainerRequest(1, 1000, 101, 0)
    pod = PodRequest(init=(c,), app=(c,))
    d = schedule(lab_node({B: BUSY, C: BUSY, D: BUSY}), pod, pod_options({}), families=FAMILIES)  # type: ignore[arg-type]
    assert d.devices is not None
    assert [x[0].uuid for x in d.devices] == [A, A]
