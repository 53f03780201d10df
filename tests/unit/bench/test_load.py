"""The load benches' CPU hog never outlives the bench: stopped when the bench leaves its block,
by an exception or SIGTERM included, and killed with the bench if the bench is killed."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.bench.load import Hog

# A bench stand-in: starts a hog of 2, prints the busy processes' ids, then sleeps until killed.
BENCH = """
import sys, time
from tests.bench.load import Hog
with Hog(2, 600) as hog:
    print("pids", *(c.pid for c in hog._children), flush=True)
    time.sleep(600)
"""


def _gone(pid: int, within: float = 30.0) -> bool:
    """Whether the process has exited (and been reaped, or become a zombie) in time."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_the_busy_processes_run_in_the_block_and_are_gone_after_it() -> None:
    with Hog(2, 600) as hog:
        pids = [c.pid for c in hog._children]
        assert hog.alive() == 2
    assert all(_gone(pid) for pid in pids)


def test_an_exception_in_the_block_stops_them_too() -> None:
    pids: list[int] = []

    def bench() -> None:
        with Hog(2, 600) as hog:
            pids.extend(c.pid for c in hog._children)
            raise RuntimeError("the bench failed")

    with pytest.raises(RuntimeError):
        bench()
    assert len(pids) == 2
    assert all(_gone(pid) for pid in pids)


def test_they_end_by_themselves_after_their_seconds() -> None:
    with Hog(1, 0.5) as hog:
        (child,) = hog._children
        assert child.wait(timeout=30) == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_bench_stopped_or_killed_leaves_no_busy_process(sig: signal.Signals) -> None:
    bench = subprocess.Popen(
        [sys.executable, "-c", BENCH],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))),
    )
    try:
        assert bench.stdout is not None
        line = next(row for row in bench.stdout if row.startswith("pids"))
        pids = [int(p) for p in line.split()[1:]]
        assert len(pids) == 2
        bench.send_signal(sig)
        bench.wait(timeout=30)
        assert all(_gone(pid) for pid in pids), pids
    finally:
        bench.kill()
        bench.wait(timeout=30)
        if bench.stdout is not None:
            bench.stdout.close()


def test_a_hog_out_of_bounds_is_refused() -> None:
    with pytest.raises(ValueError, match="between 0 and 256"):
        Hog(1000, 1)
