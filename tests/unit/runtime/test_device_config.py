"""`hami serve --device-config-file`: HAMi's device-config.yaml taken as it is. The chart's
default file (HAMi's own rendering where HAMi's source is at hand) starts the process; a
file it cannot read, or one renaming resources the process would not agree on, stops it
with one line naming the file and the key."""

from pathlib import Path

import pytest
import yaml

from hami.engine.families.ascend import DEFAULT_VNPUS
from hami.runtime.config import ConfigError, load_settings
from tests.unit.runtime.test_config import parse, tls  # noqa: F401 (a fixture)

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


def settings_with(tmp_path: Path, tls: list[str], text: str, *flags: str) -> str:  # noqa: F811
    path = tmp_path / "device-config.yaml"
    path.write_text(text)
    s = load_settings(parse(*tls, "--device-config-file", str(path), *flags), env={})
    return s.device_config_file


def test_the_charts_default_file_is_accepted(tmp_path: Path, tls: list[str]) -> None:  # noqa: F811
    assert settings_with(tmp_path, tls, yaml.safe_dump(DEFAULT)).endswith("device-config.yaml")


@pytest.mark.skipif(not (HAMI_SRC / "charts").is_dir(), reason="needs HAMi's source")
def test_hamis_own_rendered_file_is_accepted(tmp_path: Path, tls: list[str]) -> None:  # noqa: F811
    from tests.reference.record_hami import chart_device_config
    from tests.unit.test_helm_render import helm_binary

    text = chart_device_config(helm_binary(), HAMI_SRC)
    assert settings_with(tmp_path, tls, text)


@pytest.mark.parametrize(
    ("text", "flags", "message"),
    [
        ("hygon: [1]", (), "hygon must be a mapping"),
        ("- a list", (), "expected HAMi's device-config.yaml, a mapping"),
        ("nvidia: {a: [", (), "is not YAML"),
        (
            "hygon: {resourceCountName: example.com/dcu}",
            (),
            "the families' settings differ from the chart's defaults (DCU (example.com/dcu))",
        ),
        (
            yaml.safe_dump({"vnpus": {**DEFAULT_VNPUS, "hamiVnpuCore": True}}),
            (),
            "(Ascend910A (huawei.com/Ascend910A",
        ),
        ("nvidia: {resourceMemoryName: example.com/mem}", (), "nvidia.resourceMemoryName"),
        ("nvidia: {defaultMemory: 1000}", (), "set --default-memory instead"),
        ("nvidia: {defaultMemory: 1000}", ("--default-memory", "1000"), ""),
        ("nvidia: {memoryFactor: 2}", ("--memory-factor", "2"), ""),
    ],
)
def test_what_the_process_would_not_agree_on_stops_it(
    tmp_path: Path,
    tls: list[str],  # noqa: F811
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


def test_a_missing_file_is_named(tmp_path: Path, tls: list[str]) -> None:  # noqa: F811
    with pytest.raises(ConfigError, match=r"device config .*missing\.yaml"):
        load_settings(parse(*tls, "--device-config-file", str(tmp_path / "missing.yaml")), env={})
