"""`hami serve --device-config-file`: HAMi's device-config.yaml taken as it is. The chart's
default file (HAMi's own rendering where HAMi's source is at hand) starts the process, and so
does one renaming another family's resources; a file it cannot read, a value HAMi could not
decode, or a change to NVIDIA's names, stops it with one line naming the file and the field."""

from pathlib import Path

import pytest
import yaml

from hami.engine.families.ascend import DEFAULT_VNPUS
from hami.runtime.config import ConfigError, device_config, gpu_core_policy
from hami.runtime.settingsload import load_settings
from tests.builders import FAMILIES
from tests.unit.runtime.serveargs import parse

HAMI_SRC = Path("/work/hami-src")
# The sections HAMi's chart renders by default, as the families read them (a subset: the
# rest default to the same).
DEFAULT = {
    "nvidia": {
        "resourceCountName": "nvidia.com/gpu",
        "resourceMemoryName": "nvidia.com/gpumem",
        "resourceCoreName": "nvidia.com/gpucores",
        "defaultMemory": 0,
        "defaultCores": 0,
        "defaultGPUNum": 1,
        "memoryFactor": 1,
        "deviceSplitCount": 10,  # the device plugin's: not read here
    },
    "hygon": {
        "resourceCountName": "hygon.com/dcunum",
        "resourceMemoryName": "hygon.com/dcumem",
        "resourceCoreName": "hygon.com/dcucores",
        "memoryFactor": 1,
    },
    "vnpus": DEFAULT_VNPUS,
}


def settings_with(tmp_path: Path, tls: list[str], text: str, *flags: str) -> str:
    path = tmp_path / "device-config.yaml"
    path.write_text(text)
    s = load_settings(parse(*tls, "--device-config-file", str(path), *flags), env={})
    return s.device_config_file


def test_the_charts_default_file_is_accepted(tmp_path: Path, tls: list[str]) -> None:
    assert settings_with(tmp_path, tls, yaml.safe_dump(DEFAULT)).endswith("device-config.yaml")


@pytest.mark.skipif(not (HAMI_SRC / "charts").is_dir(), reason="needs HAMi's source")
def test_hamis_own_rendered_file_is_accepted(tmp_path: Path, tls: list[str]) -> None:
    from tests.builders.chart import helm_binary
    from tests.reference.record_hami import chart_device_config

    text = chart_device_config(helm_binary(), HAMI_SRC)
    assert settings_with(tmp_path, tls, text)


@pytest.mark.parametrize(
    ("text", "flags", "message"),
    [
        ("hygon: [1]", (), "hygon must be a mapping, got list"),
        ("- a list", (), "the file must be a mapping, got list"),
        ("nvidia: {a: [", (), "is not YAML"),
        ("hygon: {memoryFactor: two}", (), "hygon.memoryFactor must be a whole number"),
        ("cambricon: {resourceCountName: 7}", (), "cambricon.resourceCountName must be a resource"),
        ("metax: {sgpuTopologyAware: 'yes'}", (), "metax.sgpuTopologyAware must be true or false"),
        ("iluvatars: [{chipName: MR-V100}]", (), "iluvatars[0].commonWord is required"),
        (
            "vnpus: {configs: [{commonWord: A, resourceName: a.com/npu, templates: [{name: v}]}]}",
            (),
            "vnpus.configs[0].templates[0].memory is required",
        ),
        (
            "amd: {resourceCountName: hygon.com/dcunum}",
            (),
            "resource hygon.com/dcunum is named for both DCU and AMD",
        ),
        ("nvidia: {resourceMemoryName: example.com/mem}", (), "nvidia.resourceMemoryName"),
        ("nvidia: {resourceCountName: example.com/gpu}", (), "NVIDIA's resource names are fixed"),
        ("nvidia: {defaultMemory: 1000}", (), "set --default-memory instead"),
        ("nvidia: {defaultMemory: 1000}", ("--default-memory", "1000"), ""),
        ("nvidia: {memoryFactor: 2}", ("--memory-factor", "2"), ""),
        # Another family's names and settings are the file's to choose.
        ("hygon: {resourceCountName: example.com/dcu}", (), ""),
        (yaml.safe_dump({"vnpus": {**DEFAULT_VNPUS, "hamiVnpuCore": True}}), (), ""),
        # NVIDIA's core policy: the file's, which the flag must not contradict.
        ("nvidia: {gpuCorePolicy: sometimes}", (), "nvidia.gpuCorePolicy is 'sometimes', not one"),
        ("nvidia: {gpuCorePolicy: force}", ("--gpu-core-policy", "disable"), "set one of them"),
        ("nvidia: {gpuCorePolicy: force}", ("--gpu-core-policy", "force"), ""),
    ],
)
def test_what_the_process_cannot_use_stops_it_naming_the_field(
    tmp_path: Path,
    tls: list[str],
    text: str,
    flags: tuple[str, ...],
    message: str,
) -> None:
    if not message:
        assert settings_with(tmp_path, tls, text, *flags)
        return
    with pytest.raises(ConfigError, match=r"device config .*device-config\.yaml") as e:
        settings_with(tmp_path, tls, text, *flags)
    assert message in str(e.value)


def test_the_files_families_are_the_ones_the_process_gets(
    tmp_path: Path,
    tls: list[str],
) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text(
        "hygon: {resourceCountName: example.com/dcu, resourceMemoryName: example.com/dcu-mem}\n"
        "bogus: {}\nmetax: {resourceCountName: metax-tech.com/gpu, sgpuTopologyAwre: true}\n"
    )
    s = load_settings(parse(*tls, "--device-config-file", str(path)), env={})
    config = device_config(s)
    dcu = config.families.by_type()["DCU"].wire.resources
    assert (dcu.count, dcu.memory, dcu.cores) == ("example.com/dcu", "example.com/dcu-mem", "")
    # What HAMi ignores is told, not refused: the sGPU section names no sGPU resource now.
    assert [n.split(": ", 1)[1] for n in config.notes] == [
        "bogus: not a section HAMi v2.10 reads; ignored",
        "metax.sgpuTopologyAwre: not a key HAMi v2.10 reads; ignored",
        "Metax-SGPU: the device config names no count resource; no pod can ask for it",
    ]
    # Without a file: the chart's defaults.
    everything = parse(*tls, "--enable-ascend=true", "--enable-iluvatar=true")
    families = device_config(load_settings(everything, env={})).families
    assert [f.wire for f in families.members] == [f.wire for f in FAMILIES.members]


def test_ascend_and_iluvatar_are_scheduled_only_when_enabled_as_hamis_flags_say(
    tmp_path: Path,
    tls: list[str],
) -> None:
    """HAMi's scheduler registers Ascend and Iluvatar only with --enable-ascend and
    --enable-iluvatar (false by default); a file or a flag that configures a family left off
    is read and checked, and told as changing nothing."""

    def types(*flags: str) -> set[str]:
        return {
            f.wire.type
            for f in device_config(load_settings(parse(*tls, *flags), env={})).families.members
        }

    every = {f.wire.type for f in FAMILIES.members}
    ascend = {t for t in every if t.startswith("Ascend")}
    iluvatar = {"MR-V100", "MR-V50", "BI-V150", "BI-V100"}
    assert ascend and iluvatar <= every
    assert types() == every - ascend - iluvatar
    assert types("--enable-ascend=true") == every - iluvatar
    assert types("--enable-iluvatar=true") == every - ascend
    # The chart's Ascend values without Ascend: told, not applied.
    config = device_config(
        load_settings(parse(*tls, "--ascend-runtime-class-name", "ascend"), env={})
    )
    assert config.notes == (
        "--ascend-runtime-class-name and --ascend-hami-vnpu-core configure Ascend, which is "
        "scheduled only with --enable-ascend",
    )
    # A file's vnpus section without Ascend: checked, told.
    path = tmp_path / "device-config.yaml"
    path.write_text(yaml.safe_dump(DEFAULT))
    config = device_config(load_settings(parse(*tls, "--device-config-file", str(path)), env={}))
    assert [n.split(": ", 1)[1] for n in config.notes] == [
        "vnpus is read but not used: ascend is scheduled only with --enable-ascend"
    ]
    path.write_text(
        "vnpus: {configs: [{commonWord: A, resourceName: a.com/npu, templates: [{name: v}]}]}"
    )
    with pytest.raises(
        ConfigError, match=r"vnpus\.configs\[0\]\.templates\[0\]\.memory is required"
    ):
        device_config(load_settings(parse(*tls, "--device-config-file", str(path)), env={}))


def test_a_missing_file_is_named(tmp_path: Path, tls: list[str]) -> None:
    with pytest.raises(ConfigError, match=r"device config .*missing\.yaml"):
        load_settings(parse(*tls, "--device-config-file", str(tmp_path / "missing.yaml")), env={})


def test_the_core_policy_is_the_files_else_the_flags(
    tmp_path: Path,
    tls: list[str],
) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text("nvidia: {gpuCorePolicy: force}\n")
    s = load_settings(parse(*tls, "--device-config-file", str(path)), env={})
    assert gpu_core_policy(s, device_config(s)) == "force"
    s = load_settings(parse(*tls, "--gpu-core-policy", "disable"), env={})
    assert gpu_core_policy(s, device_config(s)) == "disable"
    with pytest.raises(ConfigError, match="--gpu-core-policy must be default, force, disable"):
        load_settings(parse(*tls, "--gpu-core-policy", "sometimes"), env={})


def test_the_charts_ascend_values_configure_every_chart_chip(tls: list[str]) -> None:
    """devices.ascend.runtimeClassName and hamiVnpuCore, as HAMi's chart renders them into
    its default vnpus: every chip's runtimeClassName, the soft split's default."""
    flags = ("--ascend-runtime-class-name", "ascend", "--ascend-hami-vnpu-core", "true")
    s = load_settings(parse(*tls, *flags, "--enable-ascend=true", "--enable-iluvatar=true"), env={})
    families = device_config(s).families
    npus = [f for f in families.others if f.wire.type.startswith("Ascend")]
    assert [f.wire for f in families.members] == [f.wire for f in FAMILIES.members]
    assert len(npus) == len(DEFAULT_VNPUS["configs"])
    for npu in npus:
        claim = npu.claim({"resources": {"limits": {npu.wire.resources.count: "1"}}}, {})
        assert claim is not None and claim.pod_fields == (("runtimeClassName", "ascend"),)
        assert npu.soft_split_default  # type: ignore[attr-defined]


def test_the_charts_ascend_values_beside_a_file_are_refused(
    tmp_path: Path,
    tls: list[str],
) -> None:
    for flags in (("--ascend-runtime-class-name", "ascend"), ("--ascend-hami-vnpu-core", "true")):
        with pytest.raises(ConfigError, match=r"set vnpus\.configs"):
            settings_with(tmp_path, tls, yaml.safe_dump(DEFAULT), *flags)
