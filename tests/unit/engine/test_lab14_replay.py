"""Lab 14, Steps 4 to 8, replayed offline: every lab-card output of the write-up, byte for byte."""

import orjson
import pytest

from hami.cli import main
from tests.reference.lab14 import (
    PENDING,
    SCENARIO,
    STEP_4,
    STEP_5,
    STEP_6_MUTEX,
    STEP_6_RELEASED,
    STEP_7,
    STEP_8_SCORES,
)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["simulate", SCENARIO, *args]) == 0
    return capsys.readouterr().out


def test_every_lab_card_output(capsys: pytest.CaptureFixture[str]) -> None:
    steps = run(capsys).split("== step ")[1:]
    tables = [
        "\n".join(line for line in s.splitlines()[1:] if "GPU-" in line) + "\n" for s in steps
    ]
    assert tables[0] == STEP_4
    assert tables[1] == STEP_5
    assert tables[2] == STEP_6_MUTEX
    assert PENDING in steps[3]
    assert "policy-mutex-c     <none>" in steps[3]
    assert tables[4] == STEP_6_RELEASED
    assert tables[8] == STEP_7


def test_step_8_score_lines(capsys: pytest.CaptureFixture[str]) -> None:
    last = run(capsys, "-v").split("== step ")[-1]
    assert "scheduling default/policy-binpack-solo\n" + STEP_8_SCORES in last


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    doc = orjson.loads(run(capsys, "--json"))
    blocked = next(p for p in doc["steps"][3]["pods"] if p["name"] == "policy-mutex-c")
    assert blocked == {
        "name": "policy-mutex-c",
        "namespace": "default",
        "node": None,
        "allocated": None,
        "mig_allocations": None,
        "pending_reason": "0/1 nodes are available: 1 4/4 ExclusiveDeviceAllocateConflict.",
    }
    solo = next(p for p in doc["steps"][8]["pods"] if p["name"] == "policy-binpack-solo")
    assert solo["allocated"] == "GPU-3c5f3637-e911-b226-7a4c-52da87c38aff,NVIDIA,1000,0:;"
    assert solo["node"] == "gke-hami-policy-lab-default-pool-0c191cbd-fnwq"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("nodes: []\n", "needs at least one node"),
        (
            "nodes: [{name: n, devices: [{id: g}]}]\n",
            "node 1, device 0: device is missing 'devmem'",
        ),
        (
            "defaults: {gpuSchedulerPolicy: fastest}\nnodes: [{name: n, devices: [{id: g, devmem: 1}]}]\n",
            "unknown GPU scheduler policy 'fastest'",
        ),
        (
            "nodes: [{name: n, devices: [{id: g, devmem: 1}]}]\nsteps: [{apply: missing.yaml}]\n",
            "missing.yaml: cannot read it: No such file",
        ),
        (
            "nodes: [{name: n, devices: [{id: g, devmem: 1}]}]\nsteps: [{scale: 3}]\n",
            "step 1: a step is",
        ),
        ("nodes: [oops\n", "is not valid YAML"),
    ],
)
def test_bad_scenarios_name_file_step_and_problem(
    tmp_path: object, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "bad.yaml"
    path.write_text(content)
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err
