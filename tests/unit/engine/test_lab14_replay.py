"""Lab 14, Steps 4 to 8, replayed offline: every lab-card output of the write-up, byte for byte."""

import orjson
import pytest

from hami.cli import main

# lab-card outputs as printed in the write-up, in the order of the scenario's steps.
STEP_4 = """\
policy-spread-a   GPU-3c5f3637-e911-b226-7a4c-52da87c38aff,NVIDIA,1000,0:;
policy-spread-b   GPU-66116373-061e-a66b-28a3-c60c4877e16e,NVIDIA,1000,0:;
"""
STEP_5 = """\
policy-binpack-a   GPU-3c5f3637-e911-b226-7a4c-52da87c38aff,NVIDIA,1000,0:;
policy-binpack-b   GPU-3c5f3637-e911-b226-7a4c-52da87c38aff,NVIDIA,1000,0:;
policy-spread-a    GPU-3c5f3637-e911-b226-7a4c-52da87c38aff,NVIDIA,1000,0:;
policy-spread-b    GPU-66116373-061e-a66b-28a3-c60c4877e16e,NVIDIA,1000,0:;
"""
STEP_6_MUTEX = """\
policy-binpack-a   GPU-3c5f3637-e911-b226-7a4c-52da87c38aff,NVIDIA,1000,0:;
policy-binpack-b   GPU-3c5f3637-e911-b226-7a4c-52da87c38aff,NVIDIA,1000,0:;
policy-mutex-a     GPU-f147e096-f059-d618-77b4-890c70ef7468,NVIDIA,1000,0:;
policy-mutex-b     GPU-77b9c63c-e3cb-8207-c355-5f65d684d2d8,NVIDIA,1000,0:;
policy-spread-a    GPU-3c5f3637-e911-b226-7a4c-52da87c38aff,NVIDIA,1000,0:;
policy-spread-b    GPU-66116373-061e-a66b-28a3-c60c4877e16e,NVIDIA,1000,0:;
"""
STEP_6_RELEASED = """\
policy-binpack-a   GPU-3c5f3637-e911-b226-7a4c-52da87c38aff,NVIDIA,1000,0:;
policy-binpack-b   GPU-3c5f3637-e911-b226-7a4c-52da87c38aff,NVIDIA,1000,0:;
policy-mutex-a     GPU-f147e096-f059-d618-77b4-890c70ef7468,NVIDIA,1000,0:;
policy-mutex-b     GPU-77b9c63c-e3cb-8207-c355-5f65d684d2d8,NVIDIA,1000,0:;
policy-mutex-c     GPU-66116373-061e-a66b-28a3-c60c4877e16e,NVIDIA,1000,0:;
policy-spread-a    GPU-3c5f3637-e911-b226-7a4c-52da87c38aff,NVIDIA,1000,0:;
"""
# Step 6's `kubectl describe pod policy-mutex-c | sed -n '/Events:/,$p' | head -8`, as printed.
STEP_6_EVENTS = """\
Events:
  Type     Reason             Age                From           Message
  ----     ------             ----               ----           -------
  Warning  FailedScheduling   32s                hami-scheduler  0/1 nodes are available: 1 4/4 ExclusiveDeviceAllocateConflict. no new claims to deallocate, preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.
  Warning  FilteringFailed    31s (x3 over 32s)  hami-scheduler  1 nodes ExclusiveDeviceAllocateConflict(gke-hami-policy-lab-default-pool-0c191cbd-fnwq)
"""  # noqa: E501 (the write-up's lines)
STEP_7 = """\
policy-binpack-solo   GPU-3c5f3637-e911-b226-7a4c-52da87c38aff,NVIDIA,1000,0:;
policy-combined-a     GPU-66116373-061e-a66b-28a3-c60c4877e16e,NVIDIA,1000,0:;
policy-combined-b     GPU-f147e096-f059-d618-77b4-890c70ef7468,NVIDIA,1000,0:;
policy-tenant         GPU-3c5f3637-e911-b226-7a4c-52da87c38aff,NVIDIA,1000,0:;
"""
STEP_8_SCORES = """\
device GPU-77b9c63c-e3cb-8207-c355-5f65d684d2d8 computer score is 0.000000
device GPU-f147e096-f059-d618-77b4-890c70ef7468 computer score is 1.651042
device GPU-66116373-061e-a66b-28a3-c60c4877e16e computer score is 1.651042
device GPU-3c5f3637-e911-b226-7a4c-52da87c38aff computer score is 1.651042
"""
PENDING = (
    "policy-mutex-c is Pending: 0/1 nodes are available: 1 4/4 ExclusiveDeviceAllocateConflict."
)
SCENARIO = "examples/lab14/scenario.yaml"


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
