"""What the requeuer tells the metrics (GPU pods turned away and still waiting, and for how
long) and the log (what it asked kube-scheduler to retry, and which pods that placed)."""

import asyncio
import logging

import pytest

from hami.service.placement import FilterOutcome, PodRef
from hami.service.requeue import Requeuer
from tests.fakes.clock import Clock
from tests.fakes.kubeapi import FakeKube


def refused(uid: str) -> FilterOutcome:
    return FilterOutcome(
        PodRef("ns", uid, uid), node_names=[], failed={"n": "CardInsufficientMemory"}
    )


def pod(uid: str, node: str = "") -> dict[str, object]:
    """Only what the requeuer reads of a pod: its uid, node and phase."""
    return {"metadata": {"uid": uid}, "spec": {"nodeName": node}, "status": {"phase": "Pending"}}


def test_waiting_counts_refused_pods_from_their_first_refusal() -> None:
    clock = Clock(100.0)
    r = Requeuer(FakeKube(), clock=clock)
    assert r.waiting() == (0, 0.0)
    r.filtered(refused("a"))
    clock.now += 10
    r.filtered(refused("b"))
    r.filtered(refused("a"))  # refused again: still waiting since its first refusal
    clock.now += 5
    assert r.waiting() == (2, 15.0)
    r.seen(pod("a", node="n"))  # placed
    assert r.waiting() == (1, 5.0)
    r.filtered(FilterOutcome(PodRef("ns", "b", "b"), node_names=["n"]))  # fits now
    assert r.waiting() == (0, 0.0)


def test_errors_and_pods_without_gpus_are_not_waiting_for_a_card() -> None:
    r = Requeuer(FakeKube(), clock=Clock(100.0))
    r.filtered(FilterOutcome(PodRef("ns", "e", "e"), error="cannot filter"))
    r.filtered(FilterOutcome(PodRef("ns", "g", "g"), node_names=[], gpu=False))
    assert r.waiting() == (0, 0.0)


def test_the_bound_drops_the_oldest_and_their_age() -> None:
    clock = Clock(100.0)
    r = Requeuer(FakeKube(), clock=clock, limit=2)
    for uid in "abc":
        r.filtered(refused(uid))
        clock.now += 1
    assert r.waiting() == (2, 2.0)


async def test_a_rescue_is_logged_from_the_release_to_the_placement(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock(100.0)
    kube = FakeKube()
    kube.add("pods", {"metadata": {"namespace": "ns", "name": "a", "uid": "a"}})
    r = Requeuer(kube, clock=clock, rate=1000.0)
    r.filtered(refused("a"))
    clock.now += 7.5
    r.released("node-1")
    with caplog.at_level(logging.INFO, logger="hami.service.requeue"):
        await r._touch_all(asyncio.Event())
        r.filtered(FilterOutcome(PodRef("ns", "a", "a"), node_names=["node-1"]))
    assert [target for _, target, _ in kube.written("patch_pod_metadata")] == ["ns/a"]
    asked, placed = caplog.records
    assert asked.getMessage() == "asked kube-scheduler to retry refused GPU pods: capacity freed up"
    assert (asked.pods, asked.freed_on) == (1, ["node-1"])  # type: ignore[attr-defined]
    assert placed.getMessage() == "pod placed after a requeue"
    assert {k: getattr(placed, k) for k in ("pod", "node", "waited_seconds", "freed_on")} == {
        "pod": "a",
        "node": "node-1",
        "waited_seconds": 7.5,
        "freed_on": ["node-1"],
    }


def test_a_pod_placed_without_a_requeue_logs_nothing_here(caplog: pytest.LogCaptureFixture) -> None:
    r = Requeuer(FakeKube(), clock=Clock(100.0))
    r.filtered(refused("a"))
    with caplog.at_level(logging.INFO, logger="hami.service.requeue"):
        r.filtered(FilterOutcome(PodRef("ns", "a", "a"), node_names=["n"]))
    assert caplog.records == []
