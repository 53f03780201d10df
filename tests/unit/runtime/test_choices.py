"""The composition root (hami.runtime.choices): every command's choices made there, from the same
flags as serve's, and no part built without them."""

import argparse
from pathlib import Path
from typing import Any

import orjson
import pytest

from hami.cache.quota import QuotaBook
from hami.cache.store import ClusterCache
from hami.cli import main, parser
from hami.engine.admission import AdmissionConfig, admit
from hami.engine.families.base import Family
from hami.engine.families.registry import Families
from hami.engine.nvidianames import NVIDIA
from hami.engine.requests import ResourceDefaults
from hami.runtime.choices import Choices, of_flags, of_settings, serve_defaults
from hami.runtime.config import Settings
from hami.runtime.settingsload import load_settings
from hami.service.nodelock.table import NodeLocks
from hami.service.placement import Placement
from hami.sim.run import Simulation
from hami.sim.scenario import load

ROOT = Path(__file__).resolve().parents[3]
ASCEND = ROOT / "examples" / "families" / "ascend.yaml"
LAB14 = ROOT / "examples" / "lab14" / "scenario.yaml"


def test_a_part_built_without_the_run_s_families_is_an_error_not_every_family() -> None:
    """Before the root, each of these took every family HAMi knows (the gated ones included)
    when its caller forgot to say which: a process given --enable-ascend=false still read
    Ascend's pods in the part built that way."""
    with pytest.raises(TypeError, match="families"):
        ClusterCache(lambda: 0.0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="families"):
        QuotaBook()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="keys"):
        NodeLocks()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="families"):
        load(ASCEND)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="parts"):
        Simulation(load(LAB14, serve_defaults().families))  # type: ignore[call-arg]


def test_a_filter_or_a_cache_without_the_run_s_policies_or_resources_is_an_error() -> None:
    """The node and card policies and NVIDIA's resource defaults are choices of the run too:
    before the root, a Placement built without them decided with spread and binpack whatever
    serve's flags said."""
    choices = serve_defaults()
    with pytest.raises(TypeError, match="resources"):
        ClusterCache(lambda: 0.0, families=choices.families)  # type: ignore[call-arg]
    cache = choices.cache(lambda: 0.0, locks=choices.locks(), reservation_ttl=1.0)
    with pytest.raises(TypeError, match="policies"):
        Placement(cache)  # type: ignore[call-arg]
    assert choices.placement(cache).policies == choices.policies


def _seen(families: Families) -> list[Any]:
    """The members as their behaviour differs: by value where the family has dataclass
    equality (Ascend's chips with their soft-split default), else by class and wire."""

    def one(f: Family) -> Any:
        return f if type(f).__eq__ is not object.__eq__ else (type(f), f.wire)

    return [one(f) for f in families.members]


DEVICE_FLAGS = [
    [],
    ["--enable-ascend=true"],
    ["--enable-ascend=true", "--ascend-hami-vnpu-core=true"],
    ["--enable-iluvatar=true", "--ascend-runtime-class-name=ascend"],
]
POSITIONAL = {"simulate": [str(ASCEND)], "explain": ["ns/pod"], "status": []}


def _ran_and_serve(command: str, flags: list[str], tmp_path: Path) -> tuple[Choices, Choices]:
    """The choices of `hami <command>` and of `hami serve`, each given `flags`."""
    pair = [tmp_path / "tls.crt", tmp_path / "tls.key"]
    for path in pair:
        path.write_text("")
    tls = ["--tls-cert-file", str(pair[0]), "--tls-key-file", str(pair[1])]
    serve = of_settings(load_settings(parser().parse_args(["serve", *tls, *flags]), env={}))
    args: argparse.Namespace = parser().parse_args([command, *flags, *POSITIONAL[command]])
    return of_flags(args, command), serve


@pytest.mark.parametrize("command", sorted(POSITIONAL))
@pytest.mark.parametrize("flags", DEVICE_FLAGS, ids=lambda f: " ".join(f) or "none")
def test_each_command_reads_the_device_flags_as_serve_does(
    command: str, flags: list[str], tmp_path: Path
) -> None:
    """The families `hami <command>` reads a cluster or a scenario with are those `hami serve`
    given the same flags schedules (before, the commands had no --ascend-* flags: serve with
    --ascend-hami-vnpu-core=true placed Ascend's soft-split pods that explain called
    ModeNotFit)."""
    ran, serve = _ran_and_serve(command, flags, tmp_path)
    assert _seen(ran.families) == _seen(serve.families)


def _placed(capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, str | None]:
    assert main(["simulate", "--json", *flags, str(ASCEND)]) == 0
    steps = orjson.loads(capsys.readouterr().out)["steps"]
    return {p["name"]: p["node"] for p in steps[-1]["pods"]}


def test_simulate_places_as_serve_with_the_chart_s_ascend_soft_split(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ascend's example asks for hami-core (p16) on nodes that do not say they offer it: with
    the chart's devices.ascend.hamiVnpuCore (serve's --ascend-hami-vnpu-core) every node does,
    and the replay places it as serve would; without, it waits (ModeNotFit), as in HAMi."""
    assert _placed(capsys, "--enable-ascend=true")["p16"] is None
    assert _placed(capsys, "--enable-ascend=true", "--ascend-hami-vnpu-core=true")["p16"]


def test_the_root_builds_nvidia_s_member_from_the_run_and_admission_claims_through_it() -> None:
    """NVIDIA's member is built from serve's settings (its defaults and core policy), and the
    webhook claims NVIDIA's containers through it, as it does every family's: a container
    asking only memory gets serve's default count and serve's core policy."""
    s = Settings(default_gpu_num=2, gpu_core_policy="force")
    choices = of_settings(s)
    container = {"name": "c", "resources": {"limits": {"nvidia.com/gpumem": "1000"}}}
    claim = choices.families.by_type()[NVIDIA].claim(container, {})
    assert claim.claimed and ("nvidia.com/gpu", 2) in claim.limits
    assert ("GPU_CORE_UTILIZATION_POLICY", "force") in claim.env
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": [container]}}
    stored = admit(pod, choices.serve_admission(s)).pod["spec"]["containers"][0]
    assert stored["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert {"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"} in stored["env"]


def test_admission_refuses_families_whose_nvidia_member_reads_other_names() -> None:
    """Admission's own reads (NVIDIA's names, the core policy of the mount checks) and the
    NVIDIA member's claim must be the same run's: one built apart is an error, not a webhook
    that claims by one set of defaults and checks by another."""
    choices = serve_defaults()
    with pytest.raises(ValueError, match="NVIDIA member"):
        AdmissionConfig(gpu_core_policy="force", families=choices.families)
    with pytest.raises(ValueError, match="NVIDIA member"):
        AdmissionConfig(resources=ResourceDefaults(default_gpu_num=3), families=choices.families)


DRA = ROOT / "examples" / "dra" / "dramode.yaml"
DRA_FLAGS = [
    ["--dra-split-count=3"],
    ["--dra-device-classes=NVIDIA=gpus.example.com@hami-core-gpu.project-hami.io"],
    ["--dra-device-classes=DCU=dra.hygon.com", "--dra-split-count=1"],
]


@pytest.mark.parametrize("command", sorted(POSITIONAL))
@pytest.mark.parametrize("flags", DRA_FLAGS, ids=" ".join)
def test_each_command_reads_the_dra_flags_as_serve_does(
    command: str, flags: list[str], tmp_path: Path
) -> None:
    """The DeviceClass (and driver) of each family's DRA claims and the tasks per card a DRA
    driver alone publishes are serve's in every command (before, simulate and explain had
    neither flag, and replayed HAMi-DRA's classes and a split of 10 whatever serve ran with)."""
    ran, serve = _ran_and_serve(command, flags, tmp_path)
    assert (ran.dra_classes, ran.dra_split) == (serve.dra_classes, serve.dra_split)
    assert ran.dra("all") == serve.dra("all")


def test_simulate_moves_only_the_families_the_dra_classes_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With NVIDIA's class alone, a Hygon pod sent to DRA is refused as serve's webhook
    refuses it (its family has no DeviceClass); with the default classes it is placed."""
    assert main(["simulate", str(DRA)]) == 0
    capsys.readouterr()
    assert (
        main(["simulate", "--dra-device-classes=NVIDIA=hami-core-gpu.project-hami.io", str(DRA)])
        == 1
    )
    out, err = capsys.readouterr()
    assert "container dcu asks DCU devices, which have no DeviceClass" in out
    assert "refused pod dcu-c" in err and "dra-b-cuda" in out


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("--dra-split-count=0", "--dra-split-count must be at least 1"),
        ("--dra-device-classes=GPU=x", "no device family 'GPU'"),
    ],
)
def test_simulate_refuses_dra_flags_serve_refuses(
    flag: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", flag, str(DRA)]) == 2
    assert says in capsys.readouterr().err
