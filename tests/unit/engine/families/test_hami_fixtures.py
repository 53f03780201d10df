"""HAMi v2.10's own scheduler's answers, replayed against ours: every family, every step.

The fixtures under tests/reference/fixtures/hami_v210/ were recorded by
tests/reference/record_hami.py from HAMi's scheduler binary (built from its v2.10.0 source)
on the e2e tier's control plane: nodes registered as each vendor's device plugin registers
them, pods let in by HAMi's own webhook, then HAMi's /filter. Each filter step is replayed
here on its own: a cache holding the fixture's nodes and, bound where HAMi put them, the pods
of earlier steps with the annotations HAMi wrote (so one divergence never leaks into the next
step), then our Placement.filter for the step's pod. The node chosen, the reasons of nodes
turned down and the annotations HAMi's filter wrote (each family's allocation text, without
clock readings) must equal HAMi's, or the step is listed in DELIBERATE_DIFFERENCES with why.

A fixture whose families are not all in hami.engine.families.registry.FAMILIES yet is
skipped (NVIDIA is always scheduled).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from hami.cache.store import ClusterCache
from hami.engine.model import PodRequest
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.service.annotations import allocation_annotations
from hami.service.placement import FilterOutcome, Placement
from tests.builders import FAMILIES

FIXTURES = Path(__file__).resolve().parents[3] / "reference" / "fixtures" / "hami_v210"
CLOCK = "<time>"  # how the recorder wrote an annotation holding a clock reading
NVIDIA = "NVIDIA"
# What HAMi's filter writes that is not a decision: its own bookkeeping of when.
NOT_COMPARED = frozenset({"hami.io/vgpu-time"})

# (fixture, pod) -> (the part of the answer that differs, why hami-py answers differently from
# HAMi v2.10 there on purpose). The rest of that step must still be HAMi's; nothing else may
# differ. The families' docs repeat these for users.
_MIXED_REASON = (
    "mixed-family-reason: HAMi fits a container's asks in Go map order (fitInDevices ranges "
    "over a map), so on a node where both families fail the reason is either family's at "
    "random (two recordings of this step gave different ones); hami-py fits NVIDIA first "
    "and gives its reason."
)
_UNTAKEN_REASON = (
    "untaken-family-annotations: HAMi gives a pod an entry for every device type of the node "
    "it lands on (allocateAppContainers' baseTypes) and writes each type's allocation "
    "annotations, so a pod taking no MetaX GPU on a node with some gets "
    "`hami.io/metax-gpu-devices-allocated: ;` (and `-to-allocate`); hami-py writes only the "
    "annotations of the families the pod takes (no device plugin's Allocate runs for a "
    "container asking none of its resources). The node chosen and its score are HAMi's."
)
# Steps the plumbing does not place as HAMi yet, and why (gaps, not deliberate differences):
# each fails the test once it is placed as HAMi places it, so that it is dropped from here.
PLUMBING_GAPS: Mapping[tuple[str, str], str] = {}
DELIBERATE_DIFFERENCES: Mapping[tuple[str, str], tuple[str, str]] = {
    ("nvidia_mixed", "p2"): (
        "annotations",
        "gpu-less-entries (tests/reference/hami_v210.py) for every family: HAMi leaves the "
        "container without cards of a family out of that family's allocation text (NVIDIA's "
        "`GPU...:;` and the DCU's `DCU...:;` for a pod with one of each per container); "
        "hami-py writes an empty entry for it, the form the device plugins map by position.",
    ),
    ("nvidia_mixed", "p5"): ("failed_nodes", _MIXED_REASON),
    **{
        ("nvidia_metax", pod): ("annotations", _UNTAKEN_REASON) for pod in ("p2", "p6", "p7", "p11")
    },
    ("nvidia_mixed", "p6"): ("failed_nodes", _MIXED_REASON),
    ("nvidia_mixed", "p11"): ("failed_nodes", _MIXED_REASON),
}


def _fixtures() -> list[Path]:
    return sorted(FIXTURES.glob("*.json"))


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _cases() -> list[Any]:
    cases = []
    for path in _fixtures():
        fixture = _load(path)
        for index, step in enumerate(fixture["steps"]):
            if step["op"] == "filter" and step["webhook"]["allowed"]:
                cases.append(
                    pytest.param(path.name, index, id=f"{fixture['family']}-{step['pod']}")
                )
    return cases


# Whether the engine reads a pod's asks of other families at all (the family plumbing, issue
# 31): a family module may land in the registry before it.
PLACES_FAMILIES = "families" in {f.name for f in fields(PodRequest)}


def _missing(fixture: Mapping[str, Any]) -> list[str]:
    known = FAMILIES.by_type()
    return [t for t in fixture["families"] if t != NVIDIA and t not in known]


def _node(node: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node["name"],
            "uid": f"uid-{node['name']}",
            "annotations": dict(node["annotations"]),
            "labels": dict(node["labels"]),
        },
        "status": {"allocatable": dict(node["allocatable"]), "capacity": dict(node["allocatable"])},
    }


def _pod(
    namespace: str, step: Mapping[str, Any], annotations: Mapping[str, str], node: str = ""
) -> dict[str, Any]:
    def container(c: Mapping[str, Any]) -> dict[str, Any]:
        resources = {"limits": dict(c["limits"])}
        if c.get("requests"):
            resources["requests"] = dict(c["requests"])
        return {"name": c["name"], "image": "pause", "resources": resources}

    spec: dict[str, Any] = {"containers": [container(c) for c in step["containers"]]}
    if step.get("init_containers"):
        spec["initContainers"] = [container(c) for c in step["init_containers"]]
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": step["pod"],
            "namespace": namespace,
            "uid": f"uid-{step['pod']}",
            "annotations": dict(annotations),
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }
    if node:
        spec["nodeName"] = node
        pod["status"] = {"phase": "Running"}
    return pod


def _earlier_pods(fixture: Mapping[str, Any], upto: int) -> list[dict[str, Any]]:
    """The pods HAMi held cards for before step `upto`: placed, not deleted since, bound where
    HAMi put them with HAMi's annotations (bind-phase success, as the device plugin leaves it)."""
    live: dict[str, dict[str, Any]] = {}
    for step in fixture["steps"][:upto]:
        if step["op"] == "delete":
            live.pop(step["pod"], None)
        elif step["op"] == "filter" and step["webhook"]["allowed"] and step["hami"]["node_names"]:
            (node,) = step["hami"]["node_names"]
            written = {
                k: ("0" if v == CLOCK else v) for k, v in step["hami"]["annotations"].items()
            }
            annotations = {**step["annotations"], **written, "hami.io/bind-phase": "success"}
            live[step["pod"]] = _pod(fixture["namespace"], step, annotations, node)
    return list(live.values())


def _written(
    ours: Mapping[str, str], hami: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """The annotations both filters decided (HAMi's clock readings left out)."""
    keys = {k for k, v in hami.items() if v != CLOCK and k not in NOT_COMPARED}
    return {k: ours.get(k, "<absent>") for k in sorted(keys)}, {k: hami[k] for k in sorted(keys)}


def filtered(
    fixture: Mapping[str, Any], index: int, candidates: list[str] | None = None
) -> tuple[ClusterCache, dict[str, Any], FilterOutcome]:
    """The cache one filter step ran on (HAMi's earlier placements counted), its pod and our
    /filter's answer; `candidates` instead of the nodes kube-scheduler passed."""
    step = fixture["steps"][index]
    cache = ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([_node(n) for n in fixture["nodes"]])
    cache.replace_pods(_earlier_pods(fixture, index))
    pod = _pod(fixture["namespace"], step, step["annotations"])
    cache.upsert_pod(pod)
    return (
        cache,
        pod,
        Placement(cache, Defaults(), ResourceDefaults()).filter(
            pod, candidates or step["node_names"]
        ),
    )


def replay(
    fixture: Mapping[str, Any], index: int, candidates: list[str] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(ours, HAMi's) for one filter step, in the same shape; `candidates` instead of the
    nodes kube-scheduler passed."""
    step = fixture["steps"][index]
    cache, pod, outcome = filtered(fixture, index, candidates)
    hami = step["hami"]
    ours_written: dict[str, str] = {}
    decision = outcome.decision
    chosen = None
    if decision is not None and decision.node is not None and decision.devices is not None:
        chosen = [decision.node]
        spec = pod.get("spec") or {}
        ours_written = allocation_annotations(
            decision.node,
            decision.devices,
            0,
            containers=(*(spec.get("initContainers") or ()), *(spec.get("containers") or ())),
            cards=cache.family_cards(decision.node),
            families=FAMILIES,
        )
    mine, theirs = _written(ours_written, hami["annotations"])
    return (
        {
            "node_names": chosen,
            "failed_nodes": dict(outcome.failed),
            "error": outcome.error,
            "annotations": mine,
        },
        {
            "node_names": hami["node_names"],
            "failed_nodes": dict(hami["failed_nodes"]),
            "error": hami["error"],
            "annotations": theirs,
        },
    )


def _tied(ours: list[str] | None, hami: list[str] | None, scores: Mapping[str, float]) -> bool:
    """Both placed the pod, on nodes HAMi scored the same."""
    if not ours or not hami or ours == hami:
        return False
    return scores.get(ours[0]) == scores.get(hami[0]) is not None


@pytest.mark.parametrize(("name", "index"), _cases())
def test_each_step_is_placed_as_hami_places_it(name: str, index: int) -> None:
    fixture = _load(FIXTURES / name)
    missing = _missing(fixture)
    if missing:
        pytest.skip(
            f"family {', '.join(missing)} is not in hami.engine.families.registry.FAMILIES yet"
        )
    if not PLACES_FAMILIES:
        pytest.skip("hami.engine.model.PodRequest has no `families` yet (the plumbing)")
    step = fixture["steps"][index]
    ours, hami = replay(fixture, index)
    if _tied(ours["node_names"], hami["node_names"], step["hami"]["node_scores"]):
        # tied-nodes (tests/reference/hami_v210.py): HAMi drew its node at random among
        # equal scores; the cards chosen on the node it drew must still be HAMi's.
        ours, hami = replay(fixture, index, hami["node_names"])
    deliberate = DELIBERATE_DIFFERENCES.get((fixture["family"], step["pod"]))
    if deliberate is not None:
        ours.pop(deliberate[0])
        hami.pop(deliberate[0])
    gap = PLUMBING_GAPS.get((fixture["family"], step["pod"]))
    if gap is not None:
        if ours == hami:
            pytest.fail(f"{fixture['family']} {step['pod']} is placed as HAMi now: drop its gap")
        pytest.xfail(gap)
    assert ours == hami, f"{fixture['family']} {step['pod']} ({step.get('note', '')})"


@pytest.mark.parametrize(("name", "index"), _cases())
def test_bind_accepts_what_filter_chose(name: str, index: int) -> None:
    """/bind's re-check (ClusterCache.overcommitted) on the cache /filter left, its reservation
    counted, accepts every card /filter gave: the two ask each family's one room rule."""
    fixture = _load(FIXTURES / name)
    if _missing(fixture):
        pytest.skip("a family of this fixture is not in the registry")
    cache, _, outcome = filtered(fixture, index)
    decision = outcome.decision
    if decision is None or decision.node is None or decision.devices is None:
        return
    assert cache.overcommitted(decision.node, decision.devices) == []


def test_every_family_has_its_fixture_of_at_least_twelve_steps() -> None:
    families = {_load(p)["family"]: _load(p) for p in _fixtures()}
    assert set(families) >= {
        "hygon",
        "cambricon",
        "iluvatar",
        "mthreads",
        "amd",
        "vastai",
        "biren",
        "awsneuron",
        "ascend",
        "enflame",
        "kunlunxin",
        "metax",
        "nvidia_mixed",
        "nvidia_metax",
    }
    short = {f: len(d["steps"]) for f, d in families.items() if len(d["steps"]) < 12}
    assert not short, short


def test_deliberate_differences_name_recorded_steps() -> None:
    steps = {(_load(p)["family"], s["pod"]) for p in _fixtures() for s in _load(p)["steps"]}
    stale = [key for key in DELIBERATE_DIFFERENCES if key not in steps]
    assert not stale, stale
    parts = {part for part, _ in DELIBERATE_DIFFERENCES.values()}
    assert parts <= {"node_names", "failed_nodes", "error", "annotations"}, parts
