"""Registering a bench's fake GPU nodes and waiting, by condition, until every component sees
them: the API server holds each with HAMi's registration annotation, our cache exports its
cards, kube-scheduler's cache holds it, and `/readyz` answers 200. On a loaded machine (a
1-minute load of 29 on two cores) 1,000 nodes took longer than the fixed 30 s the benches used
to allow; the bound here only guards against a wait that will never end, with a message that
says which of the four was still missing."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace

from tests.bench.report import readyz
from tests.bench.scrape import _insecure, fetch
from tests.e2e.cluster import ControlPlane, ControlPlaneError, NodeSim
from tests.e2e.nodespec import t4_node

REGISTER = "hami.io/node-nvidia-register"
_NODE_LABEL = re.compile(r'^hami_gpu_memory_limit_bytes\{[^}]*node="([^"]*)"', re.MULTILINE)
_SCHEDULER_NODES = re.compile(r'^scheduler_cache_size\{type="nodes"\} (\S+)$', re.MULTILINE)


def register(
    plane: ControlPlane, count: int, timeout: float, allocate_delay: float = 0.0
) -> NodeSim:
    """`count` nodes of four T4s each (n0000, n0001, ...), registered and seen by all; each
    simulated Allocate takes `allocate_delay` seconds (a slow device plugin)."""
    started = time.monotonic()
    deadline = started + timeout
    try:
        nodes = [replace(t4_node(f"n{i:04d}"), allocate_delay=allocate_delay) for i in range(count)]
        sim = plane.start_nodesim(nodes, timeout=timeout)
    except ControlPlaneError as e:
        # Its first line says what happened and where the node simulator's log is.
        raise SystemExit(
            f"{count} nodes not registered within {timeout:g}s (--register-timeout): "
            + str(e).splitlines()[0]
        ) from None
    names = {f"n{i:04d}" for i in range(count)}
    checks: list[tuple[str, Callable[[], int]]] = [
        (f"nodes with {REGISTER} in the API server", lambda: _annotated(plane, names)),
        ("nodes whose cards our /metrics exports", lambda: _ours(plane, names)),
        ("nodes in kube-scheduler's cache", lambda: _kube_scheduler(plane)),
    ]
    for what, seen in checks:
        last = -1
        while (last := _count(seen)) < count:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"{count} nodes not registered within {timeout:g}s (--register-timeout): "
                    f"{max(last, 0)} {what}"
                )
            time.sleep(2)
    while (answer := readyz(plane)) != "200":
        if time.monotonic() > deadline:
            raise SystemExit(f"/readyz answered {answer} {timeout:g}s after the nodes' start")
        time.sleep(2)
    print(f"{count} nodes registered and seen in {time.monotonic() - started:.1f}s", flush=True)
    return sim


def _count(seen: Callable[[], int]) -> int:
    """A loaded API server or scrape may time out: that is "not yet", not a failure."""
    try:
        return seen()
    except (OSError, subprocess.SubprocessError):
        return -1


def _annotated(plane: ControlPlane, names: set[str]) -> int:
    result = plane.kubectl(
        "get",
        "nodes",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.metadata.annotations."
        + REGISTER.replace(".", "\\.")
        + "}{'\\n'}{end}",
        check=False,
        timeout=60,
    )
    lines = (row.split(" ", 1) for row in result.stdout.splitlines())
    return sum(1 for row in lines if len(row) == 2 and row[0] in names and row[1].strip())


def _ours(plane: ControlPlane, names: set[str]) -> int:
    return len(set(_NODE_LABEL.findall(fetch(plane.metrics_url))) & names)


def _kube_scheduler(plane: ControlPlane) -> int:
    text = fetch(f"https://127.0.0.1:{plane.scheduler_port}/metrics", _insecure())
    match = _SCHEDULER_NODES.search(text)
    return int(float(match.group(1))) if match else -1
