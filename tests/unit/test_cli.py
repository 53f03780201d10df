"""The `hami` command's failures: one line on stderr, exit 2, never a traceback."""

import base64
import logging
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hami.certs.selfsigned import write_dev_bundle
from hami.cli import main
from hami.runtime.certsetup import serving_context
from hami.runtime.config import DEV_PAIR_COMMAND, Settings


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "not-yaml").write_text("clusters: [oops\n")
    (tmp_path / "a-string").write_text("just words\n")
    (tmp_path / "no-context").write_text("apiVersion: v1\nkind: Config\n")
    (tmp_path / "scenario.yaml").write_text("nodes: [\n")
    (tmp_path / "pem").write_text("not a certificate\n")
    write_dev_bundle(tmp_path, ["localhost"])  # ca.crt, tls.crt, tls.key
    latin1 = "apiVersion: v1\nkind: Pod\nmetadata: {name: caf\xe9}\n".encode("latin-1")
    (tmp_path / "latin1").write_bytes(latin1)
    node = "nodes: [{name: n1, devices: [{id: GPU-a, devmem: 15360, type: NVIDIA-Tesla T4}]}]\n"
    for name, step in {
        "applies-latin1": "apply: latin1",
        "applies-words": "apply: a-string",
        "applies-bad-metadata": "apply: [{kind: Pod, metadata: oops}]",
    }.items():
        (tmp_path / f"{name}.yaml").write_text(f"{node}steps: [{{{step}}}]\n")
    (tmp_path / "bad-expect.yaml").write_text(
        f"{node}steps: [{{apply: [], expect: {{denied: p}}}}]\n"
    )
    (tmp_path / "applies-endless.yaml").write_text(f"{node}steps: [{{apply: /dev/zero}}]\n")
    (tmp_path / "no-steps.yaml").write_text(node)
    (tmp_path / "empty-steps.yaml").write_text(f"{node}steps: []\n")
    pod = "{kind: Pod, metadata: {name: %s}, spec: {containers: [{name: c, image: i}]}}"
    (tmp_path / "twice-applied.yaml").write_text(
        f"{node}steps: [{{apply: [{pod % 'p'}, {pod % 'q'}, {pod % 'p'}]}}]\n"
    )
    kubeconfig(tmp_path / "bad-key", tmp_path / "tls.crt", b"not a key\n")
    kubeconfig(tmp_path / "bad-ca", tmp_path / "tls.crt", (tmp_path / "tls.key").read_bytes(), b"x")
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


def kubeconfig(path: Path, cert: Path, key: bytes, ca: bytes | None = None) -> None:
    """A kubeconfig whose cluster and user are as given; the server is never reached."""
    cluster: dict[str, object] = {"server": "https://127.0.0.1:1"}
    if ca is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    user = {
        "client-certificate-data": base64.b64encode(cert.read_bytes()).decode(),
        "client-key-data": base64.b64encode(key).decode(),
    }
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )


@pytest.fixture(autouse=True)
def _keep_root_logging() -> Iterator[None]:
    # `hami serve` installs its own log handler on the root logger.
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


# A file that never ends: each role's message, not a MemoryError after reading on and on.
ENDLESS = "/dev/zero: more than 16 MiB, far more than any file the command reads"
SERVE = ["serve", "--tls-cert-file", "{d}/tls.crt", "--tls-key-file", "{d}/tls.key", "--kubeconfig"]
NOT_UTF8 = "{d}/latin1: not UTF-8 text (byte 0xe9 at offset 45): save it as UTF-8"
BAD_PAIR = "current user's client-certificate-data and client-key-data"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["explain", "ns/p", "--kubeconfig", "{d}/missing"], "cannot read it: No such file"),
        (["explain", "ns/p", "--kubeconfig", "{d}/latin1"], f"kubeconfig {NOT_UTF8}"),
        (["status", "--kubeconfig", "{d}/latin1"], f"hami status: kubeconfig {NOT_UTF8}"),
        (["status", "--kubeconfig", "{d}/missing"], "hami status: kubeconfig {d}/missing: cannot"),
        (
            ["explain", "ns/p", "--kubeconfig", "{d}/bad-key"],
            f"kubeconfig {{d}}/bad-key: the {BAD_PAIR}",
        ),
        (["status", "--kubeconfig", "{d}/bad-key"], f"kubeconfig {{d}}/bad-key: the {BAD_PAIR}"),
        (
            ["explain", "ns/p", "--kubeconfig", "{d}/bad-ca"],
            "{d}/bad-ca: the current cluster's certificate-authority",
        ),
        ([*SERVE, "{d}/latin1"], f"hami serve: kubeconfig {NOT_UTF8}"),
        ([*SERVE, "{d}/bad-key"], f"hami serve: kubeconfig {{d}}/bad-key: the {BAD_PAIR}"),
        (["serve", "--config", "{d}/latin1"], f"hami serve: config file {NOT_UTF8}"),
        (
            ["serve", "--kubeconfig", "{d}/missing"],
            "--tls-key-file are required: kube-apiserver only calls webhooks over HTTPS; for a "
            "development pair run: openssl req -x509",
        ),
        (
            ["serve", "--tls-cert-file", "{d}/pem", "--tls-key-file", "{d}/tls.key"],
            "hami serve: --tls-cert-file {d}/pem and --tls-key-file {d}/tls.key are not a PEM "
            "certificate and its key",
        ),
        (
            ["serve", "--tls-cert-file", "{d}/tls.crt", "--tls-key-file", "{d}/pem"],
            "for a development pair run: openssl req -x509",
        ),
        (["simulate", "{d}/latin1"], f"hami simulate: {NOT_UTF8}"),
        (["simulate", "{d}/applies-latin1.yaml"], f"step 1: {NOT_UTF8}"),
        (
            ["simulate", "{d}/applies-words.yaml"],
            "step 1: only Pod, ResourceSlice and ResourceClaim manifests can be applied",
        ),
        (["simulate", "{d}/applies-bad-metadata.yaml"], "step 1: a pod has no metadata.name"),
        (["simulate", "{d}/bad-expect.yaml"], "step 1: expect takes 'denied: [names"),
        (["simulate", "{d}"], "hami simulate: {d}: cannot read it: Is a directory"),
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
        (["simulate", "/dev/zero"], f"hami simulate: {ENDLESS}"),
        (["simulate", "{d}/applies-endless.yaml"], f"step 1: {ENDLESS}"),
        (
            ["simulate", "--device-config-file", "/dev/zero", "{d}/no-steps.yaml"],
            f"hami simulate: device config {ENDLESS}",
        ),
        (["status", "--kubeconfig", "/dev/zero"], f"hami status: kubeconfig {ENDLESS}"),
        (["explain", "ns/p", "--kubeconfig", "/dev/zero"], f"hami explain: kubeconfig {ENDLESS}"),
        ([*SERVE, "/dev/zero"], f"hami serve: kubeconfig {ENDLESS}"),
        (["serve", "--config", "/dev/zero"], f"hami serve: config file {ENDLESS}"),
        (["simulate", "{d}/no-steps.yaml"], "needs at least one step under 'steps'"),
        (["simulate", "{d}/empty-steps.yaml"], "needs at least one step under 'steps'"),
        (
            ["simulate", "{d}/twice-applied.yaml"],
            "step 1: pod 'p' is applied twice; each pod needs its own name",
        ),
        (["status", "--request-timeout", "0"], "--request-timeout must be more than 0 seconds"),
        (["explain", "a/b", "--request-timeout", "-1"], "--request-timeout must be more than 0"),
        (["bench", "--nodes", "0"], "hami bench: --nodes must be at least 1"),
        (["bench", "--runs", "many"], "invalid int value: 'many' (see hami bench --help)"),
        (["bench", "--memory", "100,0"], "hami bench: --memory must be at least 1"),
        (["bench", "--in-flight", "-1"], "hami bench: --in-flight must be at least 0"),
        (
            ["bench", "--node-policy", "spread,fastest"],
            "invalid node policy list (spread, binpack) value: 'spread,fastest'",
        ),
        (["bench", "--candidates", "some"], "invalid candidates list (all, share) value: 'some'"),
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


REFUSED = """\
nodes: [{name: n1, devices: [{id: GPU-a, devmem: 15360, type: NVIDIA-Tesla T4}]}]
steps:
  - apply:
      - kind: Pod
        metadata: {name: ok}
        spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1}}}]}
      - kind: Pod
        metadata: {name: bad}
        spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpumem: lots}}}]}
"""


@pytest.mark.parametrize(
    ("expect", "code", "message"),
    [
        ("", 1, "hami simulate: step 1 refused pod bad (a step's 'expect: {denied: [names]}'"),
        ("    expect: {denied: [bad]}\n", 0, ""),
        ("    expect: {denied: [bad, ok]}\n", 1, "step 1 admitted pod ok, which its expect.denied"),
    ],
)
def test_simulate_fails_when_a_step_is_refused_unless_the_scenario_expects_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], expect: str, code: int, message: str
) -> None:
    (tmp_path / "s.yaml").write_text(REFUSED + expect)
    assert main(["simulate", str(tmp_path / "s.yaml")]) == code
    out, err = capsys.readouterr()
    assert "denied the request" in out  # the replay is printed either way
    assert err.count("\n") == (1 if message else 0) and message in err


def test_the_development_pair_command_makes_a_pair_hami_serve_loads(tmp_path: Path) -> None:
    """The command the TLS errors give, as docs/cli.md shows it, run as written."""
    cli_doc = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    assert DEV_PAIR_COMMAND in " ".join(cli_doc.replace("\\\n", " ").split())
    if shutil.which("openssl") is None:
        pytest.skip("no openssl on PATH")
    subprocess.run(shlex.split(DEV_PAIR_COMMAND), cwd=tmp_path, check=True, capture_output=True)
    context = serving_context(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    assert context.not_after > time.time()
