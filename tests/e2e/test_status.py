"""`hami status --watch` on a terminal: tmux runs it against the real control plane, and the
screen is read back with capture-pane while the cluster changes underneath it."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from tests.e2e.lab14 import NODE, UUIDS, apply, wait_ready
from tests.reference.lab14 import STEP_4

from .cluster import ControlPlane, NodeSim, unavailable
from .kube import Kube, wait_for
from .nodespec import t4_node

pytestmark = pytest.mark.e2e

SESSION = "status"
FREED = "GPU-66116373-061e-a66b-28a3-c60c4877e16e"  # policy-spread-b's card in Step 4


class Terminal:
    """A tmux server of the test's own (its socket in the test's folder), one 160x50 window."""

    def __init__(self, tmux: str, socket: Path, env: dict[str, str]) -> None:
        self.argv = [tmux, "-S", str(socket)]
        self.env = env

    def __call__(self, *args: str) -> str:
        result = subprocess.run(
            [*self.argv, *args], capture_output=True, text=True, env=self.env, timeout=30
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    def start(self, command: str) -> None:
        self("new-session", "-d", "-s", SESSION, "-x", "160", "-y", "50", command)
        # Keep the pane once the command exits, to read how it exited.
        self("set-option", "-t", SESSION, "remain-on-exit", "on")

    def screen(self) -> list[str]:
        return self("capture-pane", "-p", "-t", SESSION).splitlines()

    def everything(self) -> str:
        """The screen and every line scrolled off it."""
        return self("capture-pane", "-p", "-S", "-", "-E", "-", "-t", SESSION)

    def pane(self, what: str) -> str:
        return self("display-message", "-p", "-t", SESSION, f"#{{{what}}}").strip()


@pytest.fixture
def terminal(tmp_path: Path, control_plane: ControlPlane) -> Iterator[Terminal]:
    tmux = shutil.which("tmux")
    if tmux is None:
        unavailable("no tmux on PATH (scripts/check installs it): hami status's screen test")
    term = Terminal(tmux, tmp_path / "tmux.sock", control_plane.env)
    try:
        yield term
    finally:
        subprocess.run([*term.argv, "kill-server"], capture_output=True, timeout=30)


def pods_section(screen: list[str], namespace: str) -> str:
    start = screen.index(f"PODS {namespace}") + 1
    end = screen.index("", start)
    return "".join(line + "\n" for line in screen[start:end])


# Runs argv[2:], then writes its exit status to argv[1].
RECORD_EXIT = (
    "import signal, subprocess, sys\n"
    "child = subprocess.Popen(sys.argv[2:])\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "code = child.wait()\n"
    "open(sys.argv[1], 'w').write(str(code))\n"
)


def test_watch_redraws_the_cards_in_place(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    terminal: Terminal,
    tmp_path: Path,
) -> None:
    nodesim(t4_node(NODE, UUIDS))
    apply(kube, namespace, "01-spread-pods.yaml")
    wait_ready(kube, namespace, "policy-spread-a", "policy-spread-b")

    argv = [sys.executable, "-m", "hami", "status", "--watch", "--interval", "0.5"]
    argv += ["--kubeconfig", str(control_plane.kubeconfig)]
    # tmux learns a pane's exit status by reaping its process, which races the end of the pty:
    # under load it reports none (tmux 3.3). A parent that ignores Ctrl-C writes it down.
    exit_file = tmp_path / "hami-status.exit"
    terminal.start(shlex.join([sys.executable, "-c", RECORD_EXIT, str(exit_file), *argv]))

    def shows(text: str) -> Callable[[], bool]:
        return lambda: any(text in line for line in terminal.screen())

    wait_for(shows(f"PODS {namespace}"), timeout=30, what="hami status to draw the lab's pods")
    screen = terminal.screen()
    assert screen[0].startswith("hami status, every 0.5s, ")
    assert screen[2] == f"NODE {NODE}"
    assert pods_section(screen, namespace) == STEP_4
    freed = next(line for line in screen if FREED in line and "/15360" in line)
    assert "1000/15360" in freed and f"{namespace}/policy-spread-b" in freed

    kube("delete", "-n", namespace, "pod", "policy-spread-b", "--wait=false")
    wait_for(lambda: not shows("policy-spread-b")(), timeout=60, what="the redraw without the pod")
    screen = terminal.screen()
    freed = next(line for line in screen if FREED in line and "/15360" in line)
    assert "   0/15360" in freed and freed.endswith("  -"), freed
    assert pods_section(screen, namespace) == STEP_4.splitlines(keepends=True)[0]
    # Redrawn in place: one frame on the terminal, nothing scrolled off above it, even after
    # dozens of redraws.
    assert terminal.everything().count("hami status, every") == 1

    terminal("send-keys", "-t", SESSION, "C-c")

    exit_code = wait_for(
        lambda: exit_file.exists() and exit_file.read_text(), timeout=30, what="hami status to exit"
    )
    assert exit_code == "0"


def test_watch_json_is_one_document_per_read(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    nodesim(t4_node(NODE, UUIDS))
    apply(kube, namespace, "01-spread-pods.yaml")
    wait_ready(kube, namespace, "policy-spread-a", "policy-spread-b")
    argv = [sys.executable, "-m", "hami", "status", "--watch", "--json", "--interval", "0.2"]
    argv += ["--kubeconfig", str(control_plane.kubeconfig)]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, text=True, env=control_plane.env
    ) as process:
        try:
            assert process.stdout is not None
            reads = [orjson.loads(process.stdout.readline()) for _ in range(3)]
        finally:
            process.kill()
    for doc in reads:
        (node,) = doc["nodes"]
        assert node["name"] == NODE
        held = sorted(p["name"] for p in doc["pods"] if p["namespace"] == namespace)
        assert held == ["policy-spread-a", "policy-spread-b"]
