"""An API server that accepts connections and never answers: `hami status`, `hami explain` and
`hami serve`'s start give up within their timeout and name the server; and Ctrl-C ends
`hami serve` from its first instant."""

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hami.certs.selfsigned import write_dev_bundle
from hami.cli import main
from hami.kube.client import Kube
from hami.kube.connect import connect
from hami.runtime.preflight import require_admission_policy
from tests.e2e.cluster import free_ports


@pytest.fixture
def silent() -> Iterator[str]:
    """The URL of a listener on 127.0.0.1 that never accepts: the kernel completes each TCP
    handshake into the backlog, and nothing ever reads the request (TLS's hello included)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"https://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def kubeconfig(tmp_path: Path, silent: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": silent, "insecure-skip-tls-verify": True}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


@pytest.mark.parametrize(
    ("argv", "call"),
    [(["status"], "list nodes"), (["explain", "ns/p"], "get pod ns/p")],
)
def test_status_and_explain_name_the_server_that_does_not_answer(
    kubeconfig: str, silent: str, capsys: pytest.CaptureFixture[str], argv: list[str], call: str
) -> None:
    code = main([*argv, "--kubeconfig", kubeconfig, "--request-timeout", "0.5"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"hami {argv[0]}: {call}: no answer from {silent} within 0.5s\n"


async def test_serve_start_blames_the_server_not_the_admission_policy(
    kubeconfig: str, silent: str
) -> None:
    kube = Kube(await connect(kubeconfig), timeout=0.2)
    try:
        with pytest.raises(OSError, match="cannot tell whether the admission policy") as caught:
            await require_admission_policy(kube, "hami-scheduling-state", False, 0.5, 0.1)
    finally:
        await kube.close()
    assert f"no answer from {silent} within 0.2s" in str(caught.value)
    assert "not in force" not in str(caught.value)


def test_ctrl_c_stops_serve_from_its_first_instant(tmp_path: Path, kubeconfig: str) -> None:
    """Started as a script's background job is, with SIGINT ignored, and interrupted until it
    ends: it ends on the signal, not later on its own, the API server never having answered
    (it would then have exited 2 naming the server)."""
    write_dev_bundle(tmp_path, ["localhost"])
    ports = [str(p) for p in free_ports(3)]
    argv = [sys.executable, "-m", "hami", "serve", "--kubeconfig", kubeconfig]
    argv += ["--tls-cert-file", str(tmp_path / "tls.crt"), "--tls-key-file"]
    argv += [str(tmp_path / "tls.key"), "--port", ports[0], "--extender-port", ports[1]]
    argv += ["--metrics-port", ports[2]]
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    ) as serve:
        for _ in range(120):  # a failure guard of a minute, in steps
            if serve.poll() is not None:
                break
            serve.send_signal(signal.SIGINT)
            time.sleep(0.5)
        else:
            serve.kill()
        _, err = serve.communicate(timeout=60)
    # 0: stopped during start-up; 130, or ended by SIGINT itself: before that, as any command.
    assert serve.returncode in (0, 130, -signal.SIGINT), err
    assert "Traceback" not in err and "hami serve:" not in err, err
