"""`hami serve` settings: precedence, validation, clear errors."""

from pathlib import Path

import pytest

from hami.engine.families.registry import Families
from hami.engine.nvidianames import NVIDIA
from hami.runtime.config import ConfigError, Settings, device_classes
from hami.runtime.settingsload import load_settings
from tests.builders import FAMILIES
from tests.unit.runtime.serveargs import parse


def test_flags_beat_environment_beat_file(tmp_path: Path, tls: list[str]) -> None:
    file = tmp_path / "hami.yaml"
    file.write_text("gpu-scheduler-policy: binpack\nnode_scheduler_policy: spread\nport: 8443\n")
    env = {"HAMI_NODE_SCHEDULER_POLICY": "binpack", "HAMI_PORT": "7443", "POD_NAME": "hami-0"}
    s = load_settings(parse("--config", str(file), "--port", "6443", *tls), env)
    assert (s.gpu_scheduler_policy, s.node_scheduler_policy, s.port) == ("binpack", "binpack", 6443)
    assert s.identity == "hami-0"


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--gpu-scheduler-policy", "fastest"], {}, "unknown GPU scheduler policy 'fastest'"),
        (["--node-scheduler-policy", "pack"], {}, "valid names: binpack, spread"),
        ([], {"HAMI_PORT": "https"}, "environment HAMI_PORT: port must be int"),
        (["--port", "9395"], {}, "--port, --extender-port and --metrics-port must differ"),
        (["--extender-port", "9443"], {}, "--port, --extender-port and --metrics-port must differ"),
        (
            ["--extender-bind-address", "0.0.0.0"],
            {},
            "--extender-bind-address must be a loopback address, got 0.0.0.0",
        ),
        (["--read-timeout-seconds", "0"], {}, "--read-timeout-seconds must be positive"),
        (["--memory-factor", "0"], {}, "--memory-factor must be at least 1"),
        (["--node-lock-wait-seconds", "-1"], {}, "--node-lock-wait-seconds must not be negative"),
        (["--driver-profile", "gce"], {}, "unknown driver profile 'gce'"),
        (["--driver-profile", "generic"], {}, "needs the host and container lib64 paths"),
        (["--node-integration", "kai"], {}, "unknown node integration mode 'kai'"),
        (["--logging-format", "xml"], {}, "--logging-format must be text or json, got 'xml'"),
        (["--gfd-split-count", "-1"], {}, "--gfd-split-count must not be negative"),
        (["--dra-split-count", "0"], {}, "--dra-split-count must be at least 1"),
        (
            ["--gfd-split-count", "10"],
            {},
            "--gfd-split-count needs --node-integration standalone",
        ),
        (["--extender-http-timeout", "1s"], {}, "a bind no time"),
        (["--extender-http-timeout", "30"], {}, "--extender-http-timeout: '30': a unit"),
        (["--api-write-limit", "0"], {}, "--api-write-limit must be at least 1"),
        (["--bind-write-timeout-seconds", "0"], {}, "--bind-write-timeout-seconds must be"),
        (["--keepalive-timeout-seconds", "-1"], {}, "--keepalive-timeout-seconds must be"),
    ],
)
def test_bad_settings_are_named(
    tls: list[str], argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_settings(parse(*argv, *tls), env)


def test_missing_tls_files_are_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a readable file"):
        load_settings(
            parse(
                "--tls-cert-file", str(tmp_path / "nope"), "--tls-key-file", str(tmp_path / "nope")
            ),
            {},
        )


def test_unknown_keys_in_the_file_are_reported(tmp_path: Path, tls: list[str]) -> None:
    file = tmp_path / "hami.yaml"
    file.write_text("gpu_policy: binpack\n")
    with pytest.raises(ConfigError, match="unknown settings gpu_policy"):
        load_settings(parse("--config", str(file), *tls), {})


def test_serve_exits_with_the_message(capsys: pytest.CaptureFixture[str]) -> None:
    from hami.cli import main

    assert main(["serve", "--gpu-scheduler-policy", "nope"]) == 2
    assert "hami serve: unknown GPU scheduler policy 'nope'" in capsys.readouterr().err


def test_gfd_registration_is_an_opt_in_of_standalone_mode(tls: list[str]) -> None:
    assert load_settings(parse(*tls), {}).gfd_split_count == 0
    s = load_settings(
        parse("--node-integration", "standalone", *tls), {"HAMI_GFD_SPLIT_COUNT": "4"}
    )
    assert s.gfd_split_count == 4


def test_idle_connections_outlive_gos_idle_timeout() -> None:
    # kube-apiserver's webhook client and kube-scheduler's extender client keep an idle
    # connection for 90 s (IdleConnTimeout of Go's http.DefaultTransport, which client-go's
    # transports inherit in v1.35) and never resend a POST on one the server closed under them.
    assert Settings().keepalive_timeout_seconds > 90


def test_the_classes_the_dra_bookkeeping_counts_are_not_refused_while_it_runs() -> None:
    listed = "gpu.nvidia.com,mig.nvidia.com,hami-core-gpu.project-hami.io,my.gpus.example.com"
    counting = Settings(dra_gpu_device_classes=listed)
    assert device_classes(counting, FAMILIES) == ("mig.nvidia.com", "my.gpus.example.com")
    blind = Settings(dra_gpu_device_classes=listed, dra_bookkeeping=False)
    assert device_classes(blind, FAMILIES) == tuple(listed.split(","))


def test_the_counted_classes_follow_the_families_dra_drivers() -> None:
    # Hygon's driver publishes DCUs the bookkeeping counts: its class is admitted as NVIDIA's
    # are, while a run whose families have no Hygon member still refuses it.
    defaults = Settings()
    assert "dra.hygon.com" not in device_classes(defaults, FAMILIES)
    nvidia_only = Families((FAMILIES.by_type()[NVIDIA],))
    assert "dra.hygon.com" in device_classes(defaults, nvidia_only)
    assert "hami-core-gpu.project-hami.io" not in device_classes(defaults, nvidia_only)
