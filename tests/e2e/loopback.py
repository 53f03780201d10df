"""The guard that keeps the e2e tier on loopback.

Tests may send traffic only to 127.0.0.0/8 (or into a network namespace they made). After a
run, every component log is searched for a dial or a URL naming any other address, or a
Service's cluster DNS name (kube-apiserver resolves those to a ClusterIP on the host network).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from pathlib import Path

from hami.runtime.listeners import is_loopback

_TARGET = re.compile(
    r"(?:dial (?:tcp|udp)\s+|https?://)"
    r"(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(?::\d+)?"
)


def off_loopback(lines: Iterable[str]) -> list[str]:
    """The lines that name a target outside loopback."""
    found = []
    for line in lines:
        for match in _TARGET.finditer(line):
            if not _is_loopback(match.group("host").strip("[]")):
                found.append(line.strip())
                break
    return found


def _is_loopback(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        # A name: only a Service's cluster name would be dialled, and that is never loopback.
        return host == "localhost" or not (host.endswith(".svc") or ".svc." in host)
    return is_loopback(host)


def scan(run_dir: Path) -> list[str]:
    """`file: line` for each off-loopback target in the run folder's component logs."""
    found = []
    for log in sorted(run_dir.glob("*.log")):
        with log.open(errors="replace") as lines:
            found += [f"{log.name}: {line}" for line in off_loopback(lines)]
    return found
