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


DRA_MODE = Path("examples/dra/dramode.yaml")


def test_dra_mode_pods_are_placed_as_the_placer_places_them_and_their_claims_counted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """examples/dra/dramode.yaml: the DRA pods' cards follow their policies beside a
    device-plugin pod on the same card, a Hygon pod's DCU among those dra.hygon.com
    publishes, and a deleted pod's claim goes with it."""
    first, second = run(capsys, str(DRA_MODE)).split("== step ")[1:]
    assert first.splitlines()[1:] == [
        "dcu-c   DCU DCU-k100-1,DCU,4000,30:;",
        "dcu-d   DCU DCU-k100-0,DCU,4000,30:;",
        "dp-a    GPU-t4-1,NVIDIA,8000,0:;",
        "dra-b   GPU-t4-1,NVIDIA,4000,0:;",
        "claim default/dcu-c-dcu on dcu-node: DCU-k100-1 4000 MiB, 30 cores",
        "claim default/dcu-d-dcu on dcu-node: DCU-k100-0 4000 MiB, 30 cores",
        "claim default/dra-b-cuda on t4-node: GPU-t4-1 4000 MiB, 0 cores",
        "",
    ]
    assert "dra-e   GPU-t4-0,NVIDIA,12000,0:;" in second
    assert "dra-b " not in second and "dra-b-cuda" not in second
    pods = orjson.loads(run(capsys, str(DRA_MODE), "--json"))["steps"][0]["pods"]
    assert {p["name"]: p.get("claims") for p in pods} == {
        "dcu-c": ["dcu-c-dcu"],
        "dcu-d": ["dcu-d-dcu"],
        "dp-a": None,
        "dra-b": ["dra-b-cuda"],
    }


def test_a_dra_pod_no_published_card_takes_stays_gated_with_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = yaml.safe_load(DRA_MODE.read_text())
    (big,) = scenario["steps"][1]["apply"]
    big["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = 16000
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scenario))
    last = run(capsys, str(tmp_path / "s.yaml")).split("== step ")[-1]
    assert "dra-e   <none>" in last
    assert "dra-e is Pending: 0/2 nodes are available:" in last
    assert "claim default/dra-e-cuda" not in last


def test_a_dra_pod_with_no_published_card_anywhere_is_told_which_driver_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = yaml.safe_load(DRA_MODE.read_text())
    first = scenario["steps"][0]["apply"]
    scenario["steps"] = [{"apply": [o for o in first if o["kind"] != "ResourceSlice"]}]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scenario))
    out = run(capsys, str(tmp_path / "s.yaml"))
    assert (
        "dcu-c is Pending: 0/0 nodes are available: no DRA driver publishes a device on any "
        "node (no ResourceSlice names one); the pod takes its DCU devices from DeviceClass "
        "dra.hygon.com of driver dra.hygon.com: install that DRA driver"
    ) in out
    assert "dp-a    GPU-t4-1,NVIDIA,8000,0:;" in out


def test_an_unknown_dra_mode_stops_the_replay_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = yaml.safe_load(DRA_MODE.read_text())
    scenario["defaults"]["draMode"] = "everything"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scenario))
    assert main(["simulate", str(tmp_path / "s.yaml")]) == 2
    assert "draMode 'everything': valid are off, all, annotated" in capsys.readouterr().err
