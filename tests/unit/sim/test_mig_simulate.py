"""`hami simulate` on the MIG examples: the issue's A100 worked example and the H100 one, with
the lab-card table's third column, the JSON form, and scenario errors that name the profile."""

from pathlib import Path

import orjson
import pytest

from hami.cli import main

A100 = "examples/mig/a100-scenario.yaml"
H100 = "examples/mig/h100-scenario.yaml"
CARD = "GPU-9c1b4c4e-7a4b-2b4d-b2a4-0b0e5b9f3a11"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["simulate", *args]) == 0
    return capsys.readouterr().out


def test_the_issues_worked_example(capsys: pytest.CaptureFixture[str]) -> None:
    steps = run(capsys, A100).split("== step ")[1:]
    assert steps[2].splitlines()[1:] == [
        f"mig-a   {CARD},NVIDIA,19968,43:;   3g.20gb@4-7",
        f"mig-b   {CARD},NVIDIA,4864,15:;    1g.5gb@3",
        "mig-c   <none>                                                       <none>",
        "mig-c is Pending: 0/1 nodes are available: 1 1/1 CardMigTopologyInfeasible.",
        "",
    ]
    # Slice 3 freed, mig-c takes the low 3g.20gb placement.
    assert f"mig-c   {CARD},NVIDIA,19968,43:;   3g.20gb@0-3" in steps[3]


def test_the_json_carries_the_annotation_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    out = orjson.loads(run(capsys, A100, "--json"))
    (first,) = out["steps"][0]["pods"]
    assert first["mig_allocations"] == (
        f'[{{"containerIndex":0,"deviceIndex":0,"gpuUUID":"{CARD}","profile":"3g.20gb",'
        '"placement":{"start":4,"size":4}}]'
    )


def test_the_h100_example(capsys: pytest.CaptureFixture[str]) -> None:
    steps = run(capsys, H100).split("== step ")[1:]
    shown = {line.split()[0]: line.split()[-1] for line in steps[1].splitlines()[1:] if line}
    assert shown == {"infer-a": "1g.10gb@6", "infer-b": "1g.20gb@4-5", "train": "3g.40gb@0-3"}
    assert (
        "infer-c is Pending: 0/1 nodes are available: "
        "1 1/2 CardMigTopologyInfeasible, 1/2 CardTypeMismatch." in steps[2]
    )
    assert "whole     GPU-5f2a8d1e-3c47-4b6e-9a10-7e2d4c8b1f01,NVIDIA,81559,100:;" in steps[3]
    assert "1g.20gb@6-7" in next(
        line for line in steps[4].splitlines() if line.startswith("infer-c")
    )


def test_a_table_without_mig_keeps_two_columns(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "examples/lab14/scenario.yaml")
    assert all(
        len(line.split()) == 2
        for line in out.splitlines()
        if line.startswith("policy-") and "Pending" not in line
    )


def test_a_malformed_profile_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = Path(A100).read_text().replace("{start: 4, size: 4}", "{start: 4, size: 0}")
    (tmp_path / "s.yaml").write_text(text)
    assert main(["simulate", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert "device 0" in err and "3g.20gb" in err and "at least one slice" in err
