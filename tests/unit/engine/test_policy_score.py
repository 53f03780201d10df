import pytest

from hami.engine.model import Usage
from hami.engine.policy import (
    PolicyError,
    parse_gpu_policy,
    parse_node_policy,
    parse_weights,
    pod_options,
)
from hami.engine.reasons import unschedulable_message
from hami.engine.score import Weights, card_score, make_card, node_score
from tests.unit.engine.conftest import t4


@pytest.mark.parametrize(
    ("text", "chain", "mutex", "topology", "keys", "single"),
    [
        ("spread", False, False, False, ("spread",), "spread"),
        ("mutex", False, True, False, (), "mutex"),
        ("mutex,binpack", True, True, False, ("binpack",), ""),
        (" mutex , binpack , numa ", True, True, False, ("binpack", "numa"), ""),
        ("numa", True, False, False, ("numa",), ""),
        ("binpack,binpack", True, False, False, ("binpack",), ""),
        ("mutex,topology-aware", True, True, True, (), ""),
    ],
)
def test_policy_parsing(
    text: str, chain: bool, mutex: bool, topology: bool, keys: tuple[str, ...], single: str
) -> None:
    p = parse_gpu_policy(text)
    assert (p.chain, p.mutex, p.topology, p.keys, p.single) == (
        chain,
        mutex,
        topology,
        keys,
        single,
    )


@pytest.mark.parametrize("text", ["Binpack", "binpak", "mutex,", "", "mutex,fastest"])
def test_unknown_gpu_policy_lists_valid_names(text: str) -> None:
    with pytest.raises(
        PolicyError, match="valid names: binpack, spread, numa, mutex, topology-aware"
    ):
        parse_gpu_policy(text)


def test_unknown_node_policy_is_an_error() -> None:
    with pytest.raises(PolicyError, match="valid names: binpack, spread"):
        parse_node_policy("pack")


@pytest.mark.parametrize(
    ("text", "weights"),
    [("slot=1,core=1,memory=1", Weights()), ("memory=2, slot=0 ,core=0", Weights(0, 0, 2))],
)
def test_weights(text: str, weights: Weights) -> None:
    assert parse_weights(text) == weights


@pytest.mark.parametrize(
    "text",
    [
        "slot=1,core=1",
        "slot=1,core=1,memory=1,slot=1",
        "slot=0,core=0,memory=0",
        "slot=-1,core=1,memory=1",
        "slot=a,core=1,memory=1",
        "gpu=1,core=1,memory=1",
    ],
)
def test_bad_weights(text: str) -> None:
    with pytest.raises(PolicyError):
        parse_weights(text)


def test_pod_annotation_replaces_the_default() -> None:
    from hami.engine.policy import Defaults

    opts = pod_options(
        {"hami.io/gpu-scheduler-policy": "binpack"}, Defaults("mutex,spread", "spread")
    )
    assert opts.gpu_policy.text == "binpack" and opts.node_policy == "spread"


@pytest.mark.parametrize(
    ("value", "on"),
    [("true", True), ("1", True), ("T", True), ("false", False), ("yes", False), ("", False)],
)
def test_numa_bind_reads_as_hami_reads_it(value: str, on: bool) -> None:
    # HAMi: strconv.ParseBool; what it cannot parse (`yes`) leaves NUMA binding off.
    assert pod_options({"nvidia.com/numa-bind": value}).numa_bind is on


@pytest.mark.parametrize(
    ("usage", "score"),
    [
        (Usage(), "0.000000"),
        (Usage(1, 1000, 0), "1.651042"),
        (Usage(2, 2000, 0), "3.302083"),
        (Usage(3, 3000, 0), "4.953125"),
    ],
)
def test_card_score_matches_hami_logs(usage: Usage, score: str) -> None:
    assert f"{card_score(t4('x', 0), usage):f}" == score  # Go's %f, as HAMi logs it


def test_node_score_from_existing_usage() -> None:
    cards = [make_card(t4(f"g{i}", i), Usage(1, 1000, 0)) for i in range(3)] + [
        make_card(t4("g3", 3))
    ]
    assert f"{node_score(cards):f}" == "1.238281"


def test_unschedulable_message_groups_identical_reasons() -> None:
    msg = unschedulable_message(
        3, {"a": "4/4 CardInsufficientMemory", "b": "node unregistered", "c": "node unregistered"}
    )
    assert msg == "0/3 nodes are available: 1 4/4 CardInsufficientMemory, 2 node unregistered."
    assert unschedulable_message(1, {"n": "4/4 ExclusiveDeviceAllocateConflict"}) == (
        "0/1 nodes are available: 1 4/4 ExclusiveDeviceAllocateConflict."
    )
