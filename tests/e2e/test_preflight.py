"""Without the chart's admission policy, `hami serve` refuses to start unless an administrator
accepted the risk (hami.runtime.preflight), on the real control plane.

A second `hami serve` is started beside the plane's own on ports of its own; it is the one
checked. The plane's own keeps serving throughout.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from .cluster import ControlPlane, free_ports

pytestmark = pytest.mark.e2e


def start(control_plane: ControlPlane, *extra: str) -> subprocess.Popen[str]:
    port, extender, metrics = free_ports(3)
    argv = [
        a
        for a in control_plane.app_command(port, extender, metrics, extra)
        if a != "--allow-without-admission-policy=true" or a in extra
    ]
    return subprocess.Popen(
        argv,
        env=control_plane.app_env(),
        cwd=control_plane.run_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def until_serving(process: subprocess.Popen[str], within: float = 120) -> list[str]:
    """Its log lines up to the one that says it serves (or its exit, or `within` seconds);
    the process is stopped afterwards."""
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                break
            lines.append(line)
            if '"serving"' in line:
                break
    finally:
        process.terminate()
        process.wait(timeout=60)
        process.stdout.close()
    return lines


def test_without_the_policy_the_scheduler_starts_only_when_told_it_may(
    control_plane: ControlPlane,
) -> None:
    control_plane.drop_admission_policy()
    try:
        refused = start(control_plane)
        out, _ = refused.communicate(timeout=120)
        assert refused.returncode not in (0, None), out
        assert "hami-scheduling-state is not in force" in out, out
        assert "a restarted one can only read what the edit left" in out, out
        assert "--allow-without-admission-policy=true" in out, out

        allowed = until_serving(start(control_plane, "--allow-without-admission-policy=true"))
        assert any('"serving"' in line for line in allowed), "".join(allowed)
        assert any("starting without the admission policy, as allowed" in x for x in allowed)
    finally:
        control_plane.apply_admission_policy()
    # With the policy back, a start needs no permission.
    checked = until_serving(start(control_plane))
    assert any('"serving"' in line for line in checked), "".join(checked)
