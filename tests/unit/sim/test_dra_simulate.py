"""`hami simulate` on a DRA scenario (examples/dra/scenario.yaml): ResourceSlices and allocated
ResourceClaims applied beside pods are counted by the same bookkeeper `hami serve` uses (one
card per UUID, the claim on the card its allocation names), and the pods are placed around them."""

from pathlib import Path

import orjson
import pytest
import yaml

from hami.cli import main

SCENARIO = Path("examples/dra/scenario.yaml")
CLAIM = "claim default/trainer-gpu on t4-node: GPU-t4-1 10000 MiB, 50 cores"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["simulate", *args]) == 0
    return capsys.readouterr().out


def test_the_claim_is_counted_on_its_card_and_the_pods_placed_around_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    steps = run(capsys, str(SCENARIO)).split("== step ")[1:]
    assert steps[0].splitlines()[1:] == ["binpack-a   GPU-t4-0,NVIDIA,8000,0:;", CLAIM, ""]
    assert "big is Pending: 0/1 nodes are available: 1 2/2 CardInsufficientMemory." in steps[1]
    assert CLAIM in steps[1]
    assert "big         GPU-t4-1,NVIDIA,12000,0:;" in steps[2] and "claim " not in steps[2]


def test_without_the_claim_binpack_takes_the_card_it_held(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = yaml.safe_load(SCENARIO.read_text())
    first = scenario["steps"][0]["apply"]
    scenario["steps"][0]["apply"] = [o for o in first if o["kind"] != "ResourceClaim"]
    scenario["steps"] = scenario["steps"][:1]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scenario))
    out = run(capsys, str(tmp_path / "s.yaml"))
    assert "binpack-a   GPU-t4-1,NVIDIA,8000,0:;" in out


def test_the_json_lists_the_claims_of_each_step(capsys: pytest.CaptureFixture[str]) -> None:
    steps = orjson.loads(run(capsys, str(SCENARIO), "--json"))["steps"]
    assert steps[0]["claims"] == [
        {
            "namespace": "default",
            "name": "trainer-gpu",
            "node": "t4-node",
            "cards": [{"uuid": "GPU-t4-1", "memory_mib": 10000, "cores": 50}],
        }
    ]
    assert "claims" not in steps[2]


def test_a_claim_not_allocated_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = yaml.safe_load(SCENARIO.read_text())
    (claim,) = [o for o in scenario["steps"][0]["apply"] if o["kind"] == "ResourceClaim"]
    del claim["status"]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scenario))
    assert main(["simulate", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert "ResourceClaim 'trainer-gpu' has no status.allocation" in err
