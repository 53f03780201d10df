"""A CPU hog beside a bench: `--load [N]` runs N busy processes (twice the cores if N is left
out) for as long as the bench runs, so its figures show how the scheduler fares on a loaded
machine (the issue's wedges were met at a 1-minute load of 20-40 on two cores).

The hog never outlives the bench: each busy process is stopped when the bench leaves its
`with` block (normally or by an exception, SIGTERM and SIGINT included), is killed by the kernel
if the bench process dies (PR_SET_PDEATHSIG), and ends by itself after --load-seconds or once its
parent is gone, whichever comes first.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from types import FrameType, TracebackType

from tests.e2e.cluster import _die_with_parent

# Spins until its deadline or until its parent is gone (getppid changes once it is reparented).
BUSY = """
import os, sys, time
end = time.monotonic() + float(sys.argv[1])
parent = os.getppid()
while time.monotonic() < end and os.getppid() == parent:
    sum(range(20_000))
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cores = os.cpu_count() or 1
    parser.add_argument(
        "--load",
        type=int,
        nargs="?",
        const=2 * cores,
        default=0,
        metavar="N",
        help=f"run N busy processes beside the bench (N left out: {2 * cores}, twice the "
        "cores; default none)",
    )
    parser.add_argument(
        "--load-seconds",
        type=float,
        default=4 * 3600,
        help="each busy process ends by itself after this many seconds at most",
    )


class Hog:
    """`processes` busy processes while in the `with` block."""

    def __init__(self, processes: int, seconds: float) -> None:
        if processes < 0 or processes > 256:
            raise ValueError(f"--load {processes}: between 0 and 256 busy processes")
        self.processes = processes
        self.seconds = seconds
        self._children: list[subprocess.Popen[bytes]] = []
        self._handlers: dict[signal.Signals, object] = {}

    def __enter__(self) -> Hog:
        # SIGTERM ends the bench through its finally blocks (the control plane and the hog are
        # stopped) instead of killing it where it stands.
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._handlers[sig] = signal.signal(sig, _exit_on)
        try:
            for _ in range(self.processes):
                self._children.append(
                    subprocess.Popen(
                        [sys.executable, "-c", BUSY, str(self.seconds)],
                        stdin=subprocess.DEVNULL,
                        preexec_fn=_die_with_parent,
                    )
                )
        except BaseException:
            self.stop()
            raise
        if self.processes:
            print(f"load: {self.processes} busy processes beside the bench", flush=True)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        for child in self._children:
            child.kill()
        for child in self._children:
            child.wait(timeout=30)
        self._children.clear()
        for sig, handler in self._handlers.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._handlers.clear()

    def alive(self) -> int:
        return sum(child.poll() is None for child in self._children)


def _exit_on(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} (5 min {five:.1f})"
