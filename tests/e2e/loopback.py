"""The guard that keeps the e2e tier on loopback.

Tests may send traffic only to 127.0.0.0/8 (or into a network namespace they made). After a
run, every component log is searched for a dial or a URL naming any other address, a
Service's cluster DNS name (kube-apiserver resolves those to a ClusterIP on the host network),
or a DNS lookup of any name but localhost (Go logs `lookup <name> on <resolver>` when one
fails; the query went to the machine's resolver, which may forward it off the machine).
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


_LOOKUP = re.compile(r"\blookup (?P<host>[A-Za-z0-9._-]+)(?: on \S+)?: ")


def off_loopback(lines: Iterable[str]) -> list[str]:
    """The lines that name a target outside loopback, or a name looked up in DNS."""
    found = []
    for line in lines:
        dialled = (m.group("host").strip("[]") for m in _TARGET.finditer(line))
        looked_up = (m.group("host") for m in _LOOKUP.finditer(line))
        if any(not _is_loopback(h) for h in dialled) or any(
            h != "localhost" and not _is_loopback_ip(h) for h in looked_up
        ):
            found.append(line.strip())
    return found


def _is_loopback_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return is_loopback(host)


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
