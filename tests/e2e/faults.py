"""Our process's watches cut by the fault proxy (tests.e2e.faultproxy, run as
cluster.FaultyApi), waiting until the process has met the fault."""

from __future__ import annotations

from .cluster import FaultyApi
from .kube import wait_for


def faults_on(faulty: FaultyApi, path: str) -> int:
    """How many of our requests to `path` the proxy has cut or refused so far."""
    return sum(1 for line in faulty.acted() if line.endswith(f"GET {path}"))


def cut_off(faulty: FaultyApi, pattern: str, path: str, status: int = 503) -> None:
    """Refuse our LIST and WATCH of `path` with `status` and cut the one under way; return once
    our process has met the fault (its watch cut, or a new one refused)."""
    before = faults_on(faulty, path)
    faulty.set({"method": "GET", "path": pattern, "action": "refuse", "status": status})
    wait_for(lambda: faults_on(faulty, path) > before, 30, what=f"our watch of {path} cut")
