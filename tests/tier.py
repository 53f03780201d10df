"""Which tier the running test is in, for the code that builds or runs the Kubernetes binaries
(tests/e2e/cluster.py): a test outside the e2e tier must never reach it, or the fast tier
(`-m "not e2e"`), which promises minutes and no Go, would start a 15-minute build on a fresh
clone (or wait on someone else's). tests/conftest.py says which test is running."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

# (node id, marked e2e) of the test pytest is running; None outside one (a benchmark run as a
# module, `python -m tests.bench.envelope`, builds as it needs).
_running: tuple[str, bool] | None = None


@contextlib.contextmanager
def running(nodeid: str, e2e: bool) -> Iterator[None]:
    global _running
    _running = (nodeid, e2e)
    try:
        yield
    finally:
        _running = None


def refuse_outside_e2e(what: str) -> None:
    """Fail the running test, loudly, unless it is marked e2e."""
    if _running is not None and not _running[1]:
        pytest.fail(
            f"{_running[0]} {what} but is not marked e2e: mark it @pytest.mark.e2e, so that the "
            "fast tier (-m 'not e2e') never starts the Kubernetes build (tests/e2e/k8sbins)",
            pytrace=False,
        )
