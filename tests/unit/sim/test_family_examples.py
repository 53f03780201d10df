"""`hami simulate` on every device family's example (examples/families/<family>.yaml).

Each example holds the nodes of one fixture recorded from HAMi v2.10's own scheduler
(tests/reference/fixtures/hami_v210/<family>.json), registered as that vendor's device plugin
writes them, and replays the fixture's steps up to its first delete, then the delete and the
fixture's retry. Up to the delete every pod placed or turned away in the replay must get the
answer HAMi's scheduler gave that pod (its node and allocation text, or its reasons, or its
webhook's refusal), except where test_hami_fixtures lists the step as a deliberate difference.
The whole printed replay is also checked against the golden text under golden/ (regenerate
one with `hami simulate examples/families/<family>.yaml > tests/unit/sim/golden/<family>.txt`
after a change that is meant to alter it).
"""

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hami.cli import main
from hami.engine.policy import Defaults
from hami.engine.reasons import unschedulable_message
from hami.engine.requests import ResourceDefaults
from hami.runtime.choices import serve_defaults
from hami.runtime.deviceconfig import read_device_config
from hami.service.annotations import written_cards
from hami.service.explain import explain
from hami.service.status import status
from hami.sim.run import Simulation, StepResult
from hami.sim.scenario import load
from tests.builders import FAMILIES
from tests.unit.engine.families.test_hami_fixtures import DELIBERATE_DIFFERENCES

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "families"
FIXTURES = ROOT / "tests" / "reference" / "fixtures" / "hami_v210"
GOLDEN = Path(__file__).resolve().parent / "golden"
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.yaml"))
# Fixtures whose first pod HAMi placed on one of two nodes it scored the same (0 each): the
# replay puts it on the other, and only the golden text checks what follows.
DRAWN_FIRST = frozenset({"cambricon", "enflame", "iluvatar", "mthreads"})
# `hami simulate` with every gated family enabled: the examples of all of them replay.
EVERY_FAMILY = replace(serve_defaults(), families=FAMILIES)
# The examples of the families HAMi schedules only when told to (registry.GATED).
GATED_FLAGS = {"ascend": ["--enable-ascend=true"], "iluvatar": ["--enable-iluvatar=true"]}


def test_every_recorded_family_has_an_example() -> None:
    assert sorted(p.stem for p in FIXTURES.glob("*.json")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_the_example_prints_its_golden_replay(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", *GATED_FLAGS.get(name, []), str(EXAMPLES / f"{name}.yaml")]) == 0
    assert capsys.readouterr().out == (GOLDEN / f"{name}.txt").read_text()


@pytest.mark.parametrize("name", sorted(GATED_FLAGS))
def test_a_gated_familys_example_names_the_flag_it_needs(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", str(EXAMPLES / f"{name}.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"is scheduled only with --enable-{name}=true" in err, err


def _hami_steps(name: str) -> dict[str, dict[str, Any]]:
    fixture = json.loads((FIXTURES / f"{name}.json").read_text())
    return {s["pod"]: s for s in fixture["steps"] if s["op"] == "filter"}


@pytest.mark.parametrize("name", NAMES)
def test_each_pod_gets_hamis_answer_until_the_first_delete(name: str) -> None:
    scenario = load(EXAMPLES / f"{name}.yaml", families=FAMILIES)
    results = Simulation(scenario, EVERY_FAMILY).run()
    hami = _hami_steps(name)
    placed = pending = compared = 0
    drawn: list[str] = []
    for step, result in zip(scenario.steps, results, strict=True):
        if step.delete:
            break
        (pod,) = (str(p["metadata"]["name"]) for p in step.apply)
        recorded, skip = hami[pod], DELIBERATE_DIFFERENCES.get((name, pod), ("", ""))[0]
        if not recorded["webhook"]["allowed"]:
            assert [p for p, _ in result.denied] == [pod]
            continue
        ours = next(p for p in result.pods if p.name == pod)
        answer = recorded["hami"]
        if answer["node_names"]:
            scores = answer.get("node_scores") or {}
            if ours.node != answer["node_names"][0] and scores.get(ours.node) == scores.get(
                answer["node_names"][0]
            ):
                drawn.append(name)
                break
            placed += 1
            assert ours.node == answer["node_names"][0], pod
            if skip != "annotations":
                assert ours.allocated == written_cards(answer["annotations"], families=FAMILIES), (
                    pod
                )
        else:
            pending += 1
            if skip != "failed_nodes":
                expected = unschedulable_message(len(scenario.nodes), answer["failed_nodes"])
                assert ours.pending_reason == expected, pod
        compared += 1
    # What the example is there to show: a placement, a pod that fits nowhere, a release.
    assert any(step.delete for step in scenario.steps)
    shown = {line.split(" is Pending: ")[0] for r in results for line in _pending(r)}
    assert shown and any(p.node for r in results for p in r.pods)
    if name not in DRAWN_FIRST:
        assert placed and pending and compared
    else:
        assert drawn == [name]


def _pending(result: StepResult) -> list[str]:
    return [f"{p.name} is Pending: {p.pending_reason}" for p in result.pods if p.pending_reason]


def test_a_registration_the_scheduler_cannot_read_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (EXAMPLES / "hygon.yaml").read_text()
    (tmp_path / "s.yaml").write_text(text.replace("DCU-Z100L-a-0,4,16384", "DCU-Z100L-a-0,x,16384"))
    assert main(["simulate", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert "node 1: node dcu-a: hami.io/node-dcu-register" in err, err


def test_a_node_with_no_registration_at_all_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "s.yaml").write_text("nodes: [{name: bare, allocatable: {cpu: '4'}}]\n")
    assert main(["simulate", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert "node bare: no hami.io/node-nvidia-register annotation" in err, err


# Hygon's resources as a device config renames them (tests/e2e/test_device_config.py too).
RENAMED_DCU = {
    "hygon.com/dcunum": "example.com/dcu",
    "hygon.com/dcumem": "example.com/dcu-mem",
    "hygon.com/dcucores": "example.com/dcu-cores",
}


def renamed_hygon(folder: Path) -> tuple[Path, Path]:
    """Hygon's example with its resources renamed, and the device config renaming them."""
    text = (EXAMPLES / "hygon.yaml").read_text()
    for old, new in RENAMED_DCU.items():
        text = text.replace(old, new)
    scenario = folder / "hygon.yaml"
    scenario.write_text(text)
    keys = ("resourceCountName", "resourceMemoryName", "resourceCoreName")
    config = folder / "device-config.yaml"
    config.write_text(
        "hygon:\n"
        + "".join(f"  {k}: {v}\n" for k, v in zip(keys, RENAMED_DCU.values(), strict=True))
    )
    return scenario, config


def test_a_device_config_renaming_a_familys_resources_replays_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`hami simulate --device-config-file`: Hygon's example with its resources renamed, as a
    device config renames them, is placed as the example is (the webhook, the cache, the
    filter and the bind all read the file's names); without the file its pods are nobody's."""
    scenario, config = renamed_hygon(tmp_path)
    golden = (GOLDEN / "hygon.txt").read_text()
    assert main(["simulate", "--device-config-file", str(config), str(scenario)]) == 0
    assert capsys.readouterr().out == golden
    main(["simulate", str(scenario)])
    assert capsys.readouterr().out != golden


def test_status_and_explain_read_the_configured_families(tmp_path: Path) -> None:
    """What `hami status` and `hami explain` show of pods asking the renamed resources, read
    with the configured families: their cards, and why one waits (with the chart's default
    families it would ask for no GPU)."""
    scenario_path, config = renamed_hygon(tmp_path)
    families = read_device_config(str(config)).families
    simulation = Simulation(
        load(scenario_path, families), replace(serve_defaults(), families=families)
    )
    simulation.run()
    pods = [p.obj for p in simulation.pods.values()]
    shown = status(simulation.cache, pods, ResourceDefaults()).pods
    assert all(p.allocated and "DCU" in p.allocated for p in shown if p.node)
    waiting = next(p for p in pods if not p["spec"].get("nodeName"))
    assert {p.name for p in shown if p.node is None} >= {waiting["metadata"]["name"]}
    lines = explain(simulation.cache, waiting, Defaults(), ResourceDefaults())
    assert "is pending" in lines[0] and "CardInsufficientMemory" in "\n".join(lines), lines
    defaults = Simulation(load(scenario_path, families=FAMILIES), EVERY_FAMILY).cache
    defaults.replace_pods(pods)
    assert "asks for no GPU" in explain(defaults, waiting, Defaults(), ResourceDefaults())[0]


def test_a_device_config_hami_could_not_read_stops_simulate_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "device-config.yaml"
    config.write_text("hygon: {memoryFactor: two}\nshiny: {}\n")
    assert (
        main(["simulate", "--device-config-file", str(config), str(EXAMPLES / "hygon.yaml")]) == 2
    )
    err = capsys.readouterr().err
    assert "hygon.memoryFactor must be a whole number" in err
    config.write_text("shiny: {}\n")
    assert (
        main(["simulate", "--device-config-file", str(config), str(EXAMPLES / "hygon.yaml")]) == 0
    )
    assert "warning: device config " in capsys.readouterr().err
