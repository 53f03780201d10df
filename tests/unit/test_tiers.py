"""The fast tier never starts the Kubernetes build, and the build's timeout ends all of it."""

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests import tier
from tests.e2e import cluster
from tests.e2e.kube import wait_for


def test_a_test_outside_the_e2e_tier_that_needs_the_binaries_fails_at_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """This test is not marked e2e: asking for the binaries (or helm, or promtool) fails it,
    naming it, before anything is built; HAMI_E2E_BIN_DIR points at an empty folder in case the
    guard did not hold, so that nothing is built either way."""
    monkeypatch.setenv("HAMI_E2E_BIN_DIR", str(tmp_path))
    for needs in (cluster.ensure_binaries, lambda: cluster.built_tool("helm", "HAMI_TEST_HELM")):
        # Before the guard: skipped for what the folder lacks, or a build.
        with pytest.raises(BaseException, match="is not marked e2e: mark it") as caught:
            needs()
        assert caught.type is pytest.fail.Exception, caught.value
        assert "test_tiers.py::test_a_test_outside_the_e2e_tier" in str(caught.value)


def test_a_test_of_the_e2e_tier_gets_the_binaries(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """As the e2e tier runs them: the empty folder is refused for what it lacks."""
    monkeypatch.setenv("HAMI_E2E_BIN_DIR", str(tmp_path))
    monkeypatch.delenv("E2E_REQUIRED", raising=False)
    with tier.running("an e2e test", e2e=True), pytest.raises(pytest.skip.Exception) as caught:
        cluster.ensure_binaries()
    assert f"{tmp_path} lacks etcd" in str(caught.value)


def test_a_build_past_its_timeout_is_ended_whole_and_its_lock_released(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A stand-in for build.sh: it takes a lock as build.sh does (flock on fd 9) and waits on a
    child that inherits it, as `go build` and its compilers do. Past the timeout the build is
    reported unavailable and, the whole group ended, the lock is free for the next caller."""
    monkeypatch.setattr(cluster, "LOG_ROOT", tmp_path / "logs")
    monkeypatch.delenv("E2E_REQUIRED", raising=False)
    lock, locked = tmp_path / ".build.lock", tmp_path / "locked"
    script = tmp_path / "build.sh"
    script.write_text(
        textwrap.dedent(
            f"""\
            exec 9>{lock}
            flock 9
            touch {locked}
            sleep 600
            """
        )
    )
    with pytest.raises(pytest.skip.Exception, match="took over 5s"):
        cluster.build(script, timeout=5)
    if not locked.exists():
        pytest.skip("the stand-in had not taken its lock within its 5 s: nothing to check")
    wait_for(lambda: _free(lock), timeout=30, what=f"{lock} to be free")


def _free(lock: Path) -> bool:
    fd = os.open(lock, os.O_RDWR)
    try:
        return subprocess.run(["flock", "-n", str(fd)], pass_fds=(fd,), check=False).returncode == 0
    finally:
        os.close(fd)
