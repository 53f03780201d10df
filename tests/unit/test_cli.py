"""The `hami` command's failures: one line on stderr, exit 2, never a traceback."""

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami.cli import main
from hami.runtime.config import Settings


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "not-yaml").write_text("clusters: [oops\n")
    (tmp_path / "a-string").write_text("just words\n")
    (tmp_path / "no-context").write_text("apiVersion: v1\nkind: Config\n")
    (tmp_path / "scenario.yaml").write_text("nodes: [\n")
    (tmp_path / "pem").write_text("not read before the kubeconfig\n")
    card = "{id: GPU-%s, devmem: %s, type: %s}"
    for name, cards in {
        "amd": [card % ("a", 15360, "AMD-MI300X")],
        "devmem": [card % ("a", "15G", "NVIDIA-Tesla T4")],
        "twice": [card % ("a", 15360, "NVIDIA-Tesla T4"), card % ("a", 15360, "NVIDIA-Tesla T4")],
    }.items():
        (tmp_path / f"{name}.yaml").write_text(
            f"nodes: [{{name: n1, devices: [{', '.join(cards)}]}}]\nsteps: []\n"
        )
    return tmp_path


@pytest.fixture(autouse=True)
def _keep_root_logging() -> Iterator[None]:
    # `hami serve` installs its own log handler on the root logger.
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


SERVE = ["serve", "--tls-cert-file", "{d}/pem", "--tls-key-file", "{d}/pem", "--kubeconfig"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["explain", "ns/p", "--kubeconfig", "{d}/missing"], "cannot read it: No such file"),
        (["explain", "ns/p", "--kubeconfig", "{d}/not-yaml"], "is not YAML"),
        (["explain", "ns/p", "--kubeconfig", "{d}/a-string"], "is not a kubeconfig"),
        (["explain", "ns/p", "--kubeconfig", "{d}/no-context"], "current-context"),
        (["explain", "no-slash"], "give the pod as NAMESPACE/NAME"),
        ([*SERVE, "{d}/missing"], "hami serve: kubeconfig {d}/missing: cannot read it"),
        ([*SERVE, "{d}/not-yaml"], "hami serve: kubeconfig {d}/not-yaml is not YAML"),
        (["serve", "--port", "x"], "hami serve: flag --port: port must be int"),
        (["simulate", "{d}/scenario.yaml"], "is not valid YAML"),
        (["simulate", "{d}/missing.yaml"], "cannot read"),
        (["simulate", "-x"], "hami simulate: unrecognized arguments: -x"),
        (
            ["simulate", "{d}/amd.yaml"],
            "node 1, device 0: type 'AMD-MI300X' is not an NVIDIA type; HAMi's plugin registers",
        ),
        (
            ["simulate", "{d}/devmem.yaml"],
            "node 1, device 0: devmem must be a whole number (MiB), got '15G'",
        ),
        (
            ["simulate", "{d}/twice.yaml"],
            "card id 'GPU-a' is given twice, node 1 (n1), device 0 and node 1 (n1), device 1",
        ),
        (["bench", "--nodes", "0"], "hami bench: --nodes must be at least 1"),
        (["bench", "--runs", "many"], "invalid int value: 'many' (see hami bench --help)"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_every_error_is_one_line_and_exit_2(
    files: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    try:
        code = main([a.format(d=files) for a in argv])
    except SystemExit as e:  # argparse's own exit, through _Parser.error
        code = int(e.code or 0)
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    assert message.format(d=files) in err


def test_serve_help_shows_every_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag, shown in (
        ("--port", "9443"),
        ("--gpu-scheduler-policy", "spread"),
        ("--leader-elect", "false"),
        ("--kubeconfig", "none"),
        ("--hook-path", "/usr/local/vgpu"),
    ):
        assert f"(default: {shown};" in text.split(flag, 2)[2], flag
    assert text.count("(default: ") == len(Settings.__dataclass_fields__)
