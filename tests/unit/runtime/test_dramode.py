"""--dra-mode and --dra-device-classes: what the webhook's DRA mode runs with, and the settings
that stop `hami serve` with a message naming the fix."""

import argparse
from pathlib import Path

import pytest

from hami.engine.dra.config import DEFAULT_CLASSES, DraClass, DraConfig
from hami.runtime.choices import of_settings
from hami.runtime.config import ConfigError, Settings
from hami.runtime.dramode import dra_config
from hami.runtime.settingsload import add_serve_arguments, load_settings


def settings(tmp_path: Path, *argv: str) -> Settings:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("cert")
    key.write_text("key")
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    args = p.parse_args([*argv, "--tls-cert-file", str(cert), "--tls-key-file", str(key)])
    return load_settings(args, {})


def config(s: Settings) -> DraConfig:
    """serve's DRA mode, over the classes its choices parsed (--dra-device-classes)."""
    return dra_config(s, of_settings(s))


def test_off_by_default_with_hami_dras_classes(tmp_path: Path) -> None:
    got = config(settings(tmp_path))
    assert (got.on, got.classes) == (False, DEFAULT_CLASSES)


def test_the_flags_set_mode_and_classes(tmp_path: Path) -> None:
    s = settings(tmp_path, "--dra-mode", "annotated", "--dra-device-classes", "DCU=dcu.example.com")
    assert config(s).mode == "annotated"
    assert config(s).classes == (DraClass("DCU", "dcu.example.com", "dcu.example.com"),)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--dra-mode", "yes"), "--dra-mode 'yes': valid are off, all, annotated"),
        (("--dra-device-classes", "GPU=x"), "no device family 'GPU'"),
        (
            ("--dra-mode", "all", "--node-integration", "standalone"),
            "--dra-mode all needs --node-integration hami-device-plugin",
        ),
    ],
)
def test_settings_dra_mode_cannot_use_stop_the_process(
    tmp_path: Path, argv: tuple[str, ...], says: str
) -> None:
    with pytest.raises(ConfigError, match=says):
        config(settings(tmp_path, *argv))
