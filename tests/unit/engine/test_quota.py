"""Namespace GPU quotas in the engine: reading limits, counting allocations, fitting per card."""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.engine import fit
from hami.engine.decide import schedule
from hami.engine.model import (
    PERCENTAGE_UNSET,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    NodeState,
    PodRequest,
    Usage,
)
from hami.engine.policy import pod_options
from hami.engine.quota import (
    NamespaceQuota,
    QuotaLimits,
    QuotaUsage,
    allocation_usage,
    combined_limits,
    quota_limits,
    requested_usage,
)
from hami.engine.requests import ResourceNames
from hami.engine.score import card_scores
from hami.engine.state import build_node
from hami.engine.walk import walk
from tests.builders import FAMILIES

GIB16, GIB24 = 16384, 24576
NOTHING = QuotaUsage()


@pytest.mark.parametrize(
    ("hard", "want"),
    [
        ({}, QuotaLimits()),
        ({"limits.nvidia.com/gpumem": "8000"}, QuotaLimits(memory=8000)),
        (
            {"limits.nvidia.com/gpumem": "8k", "limits.nvidia.com/gpucores": "150"},
            QuotaLimits(8000, 150),
        ),
        # HAMi reads only the limits.* keys; requests.* and the bare name are kube-apiserver's.
        ({"requests.nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "100"}, QuotaLimits()),
        # Not a whole number: skipped, as Go's AsInt64 refuses it.
        ({"limits.nvidia.com/gpumem": "1500m"}, QuotaLimits()),
        ({"limits.nvidia.com/gpumem": "0"}, QuotaLimits(memory=0)),
        ({"limits.nvidia.com/gpumem": "not a quantity"}, QuotaLimits()),
        ({"limits.cpu": "4", "limits.nvidia.com/gpu": "2"}, QuotaLimits()),
    ],
)
def test_quota_limits_read_hamis_keys(hard: dict[str, Any], want: QuotaLimits) -> None:
    assert quota_limits(hard) == want


def test_quota_limits_follow_renamed_resources() -> None:
    names = ResourceNames(memory="example.com/vmem", cores="example.com/vcores")
    hard = {"limits.example.com/vmem": "100", "limits.nvidia.com/gpumem": "5"}
    assert quota_limits(hard, names) == QuotaLimits(memory=100)


def test_several_quotas_in_a_namespace_all_apply() -> None:
    got = combined_limits([QuotaLimits(8000, None), QuotaLimits(9000, 50), QuotaLimits()])
    assert got == QuotaLimits(8000, 50)


@pytest.mark.parametrize(
    ("limits", "used", "pod", "factor", "fits"),
    [
        (QuotaLimits(), QuotaUsage(10**6, 10**3), QuotaUsage(1, 1), 1, True),
        (QuotaLimits(memory=8000), QuotaUsage(4000), QuotaUsage(4000), 1, True),
        (QuotaLimits(memory=8000), QuotaUsage(4000), QuotaUsage(4001), 1, False),
        (QuotaLimits(memory=0), QuotaUsage(), QuotaUsage(1), 1, False),
        (QuotaLimits(memory=0), QuotaUsage(), QuotaUsage(0, 30), 1, True),
        (QuotaLimits(cores=100), QuotaUsage(0, 70), QuotaUsage(0, 30), 1, True),
        (QuotaLimits(cores=100), QuotaUsage(0, 70), QuotaUsage(0, 31), 1, False),
        # The limit is written unscaled; usage is counted scaled, so the limit is scaled too.
        (QuotaLimits(memory=1000), QuotaUsage(), QuotaUsage(3000), 3, True),
        (QuotaLimits(memory=1000), QuotaUsage(), QuotaUsage(3001), 3, False),
    ],
)
def test_fits_like_hamis_fitquota(
    limits: QuotaLimits, used: QuotaUsage, pod: QuotaUsage, factor: int, fits: bool
) -> None:
    assert NamespaceQuota(limits, used, factor).fits(pod) is fits


def d(uuid: str, mem: int, cores: int = 0) -> ContainerDevice:
    return ContainerDevice(uuid, mem, cores)


@pytest.mark.parametrize(
    ("devices", "n_init", "want"),
    [
        (((d("a", 1000, 10),), (d("b", 2000, 20),)), 0, QuotaUsage(3000, 30)),
        # Two app containers on one card add up.
        (((d("a", 1000, 10),), (d("a", 2000, 20),)), 0, QuotaUsage(3000, 30)),
        # An init container's peak and the app containers' sum: the larger counts, per card.
        (((d("a", 5000, 50),), (d("a", 1000, 10),), (d("a", 1000, 10),)), 1, QuotaUsage(5000, 50)),
        (((d("a", 500, 5),), (d("a", 1000, 10), d("b", 1000, 10))), 1, QuotaUsage(2000, 20)),
        (((), (d("a", 1000),)), 0, QuotaUsage(1000)),
    ],
)
def test_allocation_usage_counts_what_the_cards_carry(
    devices: tuple[tuple[ContainerDevice, ...], ...], n_init: int, want: QuotaUsage
) -> None:
    assert allocation_usage(devices, n_init) == want


def card(uuid: str, index: int, mem: int, count: int = 10) -> DeviceInfo:
    return DeviceInfo(uuid, index, count, mem, 100, "NVIDIA-A10", 0)


def cluster(*nodes: tuple[str, tuple[DeviceInfo, ...]]) -> dict[str, NodeState]:
    return {name: build_node(name, devs, registry=FAMILIES) for name, devs in nodes}


def ask(*app: ContainerRequest | None, init: tuple[ContainerRequest, ...] = ()) -> PodRequest:
    return PodRequest(init=init, app=app)


OPTS = pod_options({})
HALF = ContainerRequest(nums=1, mem_percentage=50)
WHOLE = ContainerRequest(nums=1, mem_percentage=100, coresreq=100)


def quota(
    mem: int | None = None, cores: int | None = None, used: QuotaUsage = NOTHING
) -> NamespaceQuota:
    return NamespaceQuota(QuotaLimits(mem, cores), used)


@pytest.mark.parametrize(
    ("nodes", "request_", "q", "want_node", "want_failed"),
    [
        # No quota: the busiest-first node order (binpack) picks by name on a tie.
        (
            [("big", (card("B", 0, GIB24),)), ("small", (card("S", 0, GIB16),))],
            HALF,
            None,
            "big",
            {},
        ),
        # 50% of a 24 GiB card is 12288 MiB, over a 10000 MiB quota; of a 16 GiB card, 8192 fits.
        (
            [("big", (card("B", 0, GIB24),)), ("small", (card("S", 0, GIB16),))],
            HALF,
            quota(10000),
            "small",
            {"big": "1/1 ResourceQuotaNotFit"},
        ),
        # On one node: the card where the resolved percentage fits the quota is taken.
        (
            [("mixed", (card("S", 0, GIB16), card("B", 1, GIB24)))],
            HALF,
            quota(10000),
            "mixed",
            {},
        ),
        # Used elsewhere in the namespace counts.
        (
            [("small", (card("S", 0, GIB16),))],
            HALF,
            quota(10000, used=QuotaUsage(2000)),
            None,
            {"small": "1/1 ResourceQuotaNotFit"},
        ),
        # A whole card counts its memory and 100 cores.
        (
            [("n", (card("A", 0, GIB16), card("B", 1, GIB16)))],
            WHOLE,
            quota(cores=99),
            None,
            {"n": "2/2 ResourceQuotaNotFit"},
        ),
        # Two cards asked, the quota allows one: HAMi's walk takes one and then says why.
        (
            [("n", (card("A", 0, GIB16), card("B", 1, GIB16)))],
            ContainerRequest(nums=2, memreq=5000),
            quota(8000),
            None,
            {"n": "1/2 AllocatedCardsInsufficientRequest, 1/2 ResourceQuotaNotFit"},
        ),
        # HAMi checks the quota before the card's room, after its slots.
        (
            [("n", (card("A", 0, GIB16),))],
            ContainerRequest(nums=1, memreq=20000),
            quota(8000),
            None,
            {"n": "1/1 ResourceQuotaNotFit"},
        ),
        (
            [("n", (card("A", 0, GIB16, count=0),))],
            ContainerRequest(nums=1, memreq=20000),
            quota(8000),
            None,
            {"n": "1/1 CardTimeSlicingExhausted"},
        ),
    ],
)
def test_schedule_checks_the_quota_per_card(
    nodes: list[tuple[str, tuple[DeviceInfo, ...]]],
    request_: ContainerRequest,
    q: NamespaceQuota | None,
    want_node: str | None,
    want_failed: dict[str, str],
) -> None:
    decision = schedule(cluster(*nodes), ask(request_), OPTS, quota=q, families=FAMILIES)
    assert decision.node == want_node
    assert dict(decision.failed) == want_failed
    if decision.devices is not None and q is not None:
        assert q.fits(allocation_usage(decision.devices, 0))
        assert all(x.uuid != "B" for c in decision.devices for x in c), "the 24 GiB card is over"


@pytest.mark.parametrize(
    ("request_", "want"),
    [
        (ask(HALF), QuotaUsage()),  # a percentage counts once a card is chosen
        (ask(WHOLE), QuotaUsage(0, 100)),
        (ask(ContainerRequest(2, memreq=3000, coresreq=20)), QuotaUsage(6000, 40)),
        (
            ask(
                ContainerRequest(1, memreq=1000),
                None,
                ContainerRequest(1, memreq=2000),
                init=(ContainerRequest(1, memreq=2500, coresreq=50),),
            ),
            QuotaUsage(3000, 50),
        ),
    ],
)
def test_requested_usage_is_what_hamis_webhook_counts(
    request_: PodRequest, want: QuotaUsage
) -> None:
    assert requested_usage(request_) == want


device = st.builds(
    ContainerDevice, st.sampled_from("abcd"), st.integers(0, 9000), st.integers(0, 100)
)
containers = st.lists(st.lists(device, max_size=3).map(tuple), max_size=4).map(tuple)


@settings(max_examples=300, deadline=None)
@given(
    containers,
    st.integers(0, 4),
    st.lists(device, max_size=3, unique_by=lambda x: x.uuid).map(tuple),
    st.integers(0, 30000),
    st.integers(0, 300),
)
def test_the_gate_counts_as_the_whole_allocation_would(
    before: tuple[tuple[ContainerDevice, ...], ...],
    n_init: int,
    picked: tuple[ContainerDevice, ...],
    mem: int,
    cores: int,
) -> None:
    q = NamespaceQuota(QuotaLimits(mem, cores), QuotaUsage(1000, 10))
    n_init = min(n_init, len(before) + 1)
    assert q.gate(before, n_init)(picked) == q.admits((*before, picked), n_init)


card_state = st.tuples(
    st.sampled_from((GIB16, GIB24, 10000)),
    st.integers(0, 3),  # tasks on it
    st.integers(0, 9000),
    st.booleans(),  # healthy
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(card_state, min_size=1, max_size=6),
    st.builds(
        ContainerRequest,
        st.integers(1, 3),
        st.sampled_from((0, 2000, 9000)),
        st.sampled_from((PERCENTAGE_UNSET, 30, 100)),
        st.integers(0, 100),
    ),
    st.sampled_from(("spread", "binpack", "mutex")),
    st.integers(0, 30000),
    st.integers(0, 300),
)
def test_the_over_quota_shortcut_answers_as_the_walk(
    states: list[tuple[int, int, int, bool]],
    req: ContainerRequest,
    policy: str,
    mem: int,
    cores: int,
) -> None:
    infos = [
        DeviceInfo(f"GPU-{i}", i, 3, devmem, 100, "NVIDIA-A10", 0, health=healthy)
        for i, (devmem, _, _, healthy) in enumerate(states)
    ]
    node = build_node(
        "n",
        infos,
        {
            f"GPU-{i}": Usage(used, min(usedmem, devmem), 0)
            for i, (devmem, used, usedmem, _) in enumerate(states)
        },
        registry=FAMILIES,
    )
    opts = pod_options({"hami.io/gpu-scheduler-policy": policy})
    gate = NamespaceQuota(QuotaLimits(mem, cores), QuotaUsage(500, 5)).gate((), 0)
    cores_asked = min(req.coresreq, 100)
    key = fit._sort_key(opts.gpu_policy, opts.numa_bind)
    walked = walk(
        node.cards,
        card_scores(node.cards, opts.weights),
        req,
        cores_asked,
        opts,
        frozenset(),
        key,
        None,
        gate,
        fit.first_order(node.cards),
    )
    if req.nums <= len(node.cards):
        assert fit.fit_container(node.cards, req, opts, frozenset(), None, gate) == walked
