"""Idle connections cannot exhaust the scheduler's memory or file descriptors (issue 27).

The webhook port is open to every pod. 3,000 TLS connections that finish their handshake and
never send a byte, against `hami serve` started under a 1,024 open-file limit: the soft limit
containerd 2.0 gives containers (hard limit left high), then soft and hard both. The process
must live, stay under the chart's memory limit, keep a small log, and still take a GPU pod
through the webhook and bind it while the connections are held. Bounded: 3,000 connections,
opened for 60 s at most.
"""

from __future__ import annotations

import asyncio
import resource
import socket
import ssl
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from .cluster import ControlPlane, NodeSim
from .kube import Kube
from .nodespec import t4_node

pytestmark = pytest.mark.e2e

ATTACK = 3_000
MEMORY_LIMIT_MIB = 512  # the chart's scheduler.resources.limits.memory
FD_LIMIT = 1_024


def open_idle(
    port: int, context: ssl.SSLContext, count: int, seconds: float
) -> list[ssl.SSLSocket]:
    """Up to `count` TLS connections that complete their handshake and send nothing."""
    deadline = time.monotonic() + seconds

    def one(_: int) -> ssl.SSLSocket | None:
        if time.monotonic() > deadline:
            return None
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            return None
        try:
            return context.wrap_socket(raw, server_hostname="127.0.0.1")
        except OSError:  # the server closed it (over the cap) or never answered
            raw.close()
            return None

    with ThreadPoolExecutor(32) as pool:
        return [s for s in pool.map(one, range(count)) if s is not None]


def still_open(conn: ssl.SSLSocket) -> bool:
    """The server has not closed it: it never sends data, so reading finds nothing to read."""
    conn.setblocking(False)
    try:
        conn.recv(1)
    except ssl.SSLWantReadError:
        return True
    except OSError:
        return False
    return False


def memory_mib(pid: int) -> tuple[float, float]:
    """(resident now, peak resident) of a process, MiB."""
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


@pytest.mark.parametrize("hard_limit", ["high", "1024"])
def test_three_thousand_idle_tls_connections_under_a_1024_fd_limit(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    hard_limit: str,
) -> None:
    own = resource.getrlimit(resource.RLIMIT_NOFILE)
    if own[1] < ATTACK + 1_000:
        pytest.skip(f"this process may open {own[1]} files, the attack needs {ATTACK + 1_000}")
    nodesim(t4_node("idle-conns"))
    hard = own[1] if hard_limit == "high" else FD_LIMIT
    # A connection that sends no request is closed after --read-timeout-seconds (10 s by
    # default): held longer here, so that the attack lasts through the create and the bind
    # however slow this machine is.
    control_plane.restart_app(extra_args=("--read-timeout-seconds=300",), nofile=(FD_LIMIT, hard))
    app = control_plane.app
    assert app is not None
    log = control_plane.app_log
    held: list[ssl.SSLSocket] = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (own[1], own[1]))  # for the attack's sockets
        rss_before, _ = memory_mib(app.popen.pid)
        log_before = log.read_bytes()
        context = ssl.create_default_context(cafile=str(control_plane.app_tls.ca_file))
        started = time.monotonic()
        held = open_idle(control_plane.app_port, context, ATTACK, seconds=60)
        print(
            f"{len(held)} of {ATTACK} idle TLS connections opened in "
            f"{time.monotonic() - started:.1f}s"
        )
        created = time.monotonic()
        kube.apply(
            """\
apiVersion: v1
kind: Pod
metadata: {name: during-the-attack}
spec:
  containers:
  - name: cuda
    image: busybox
    resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}
""",
            namespace,
        )
        kube.wait_ready(namespace, ["during-the-attack"])
        print(f"GPU pod created and Ready {time.monotonic() - created:.1f}s after its create")
        pod = kube.pod(namespace, "during-the-attack")
        still = sum(still_open(c) for c in held)
        rss, peak = memory_mib(app.popen.pid)
        grown = log.read_bytes()[len(log_before) :].decode(errors="replace")
        print(
            f"hami serve under nofile {FD_LIMIT}:{hard}: RSS {rss_before:.0f} MiB before, "
            f"{rss:.0f} MiB with {still} connections still held after the bind, "
            f"peak {peak:.0f} MiB; log grew {len(grown)} bytes, {grown.count(chr(10))} lines"
        )
        assert app.alive(), "hami serve died under the attack"
        assert pod["spec"]["schedulerName"] == "hami-scheduler", "the webhook took the pod"
        assert pod["spec"].get("nodeName") == "idle-conns"
        assert still > 0, "the attack's connections were still held during the create and bind"
        assert peak < MEMORY_LIMIT_MIB, f"peak RSS {peak:.0f} MiB over the chart's limit"
        assert "Traceback" not in grown and "out of system resource" not in grown
        assert grown.count("\n") < 50, grown[-3000:]
        assert grown.count("connection cap reached") == 1, "one line for the episode"
        if hard_limit == "high":
            assert '"open-file limit raised" from=1024' in log.read_text()
    finally:
        for conn in held:
            conn.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, own)
        control_plane.restart_app(extra_args=())


# --- request bodies (issue 38) -----------------------------------------------------------------

WAVE = 512  # two waves: 1,024 slow bodies in all
BODY = 4_000_000  # under the 4 MiB a request may have
CHUNK = 64 * 1024
CHUNK_EVERY = 0.12  # the whole body in about 7.5 s, within the 10 s read deadline


async def slow_body(port: int, context: ssl.SSLContext) -> str:
    """One client sending a ~4 MiB body to /webhook slowly; what became of it: the status the
    server answered, or how the connection ended."""
    head = (
        f"POST /webhook HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {BODY}\r\n\r\n"
    ).encode()
    try:
        async with asyncio.timeout(40):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
            )
            answered = asyncio.ensure_future(reader.readline())
            try:
                writer.write(head)
                sent = 0
                while sent < BODY and not answered.done():
                    n = min(CHUNK, BODY - sent)
                    writer.write(b"x" * n)
                    await writer.drain()
                    sent += n
                    await asyncio.wait({answered}, timeout=CHUNK_EVERY)
                line = await answered
                return line.decode(errors="replace").split(" ")[1] if line else "closed"
            finally:
                answered.cancel()
                writer.transport.abort()
    except TimeoutError:
        return "timeout"
    except (OSError, IndexError):
        return "closed"


async def wave(port: int, context: ssl.SSLContext) -> Counter[str]:
    return Counter(await asyncio.gather(*(slow_body(port, context) for _ in range(WAVE))))


def test_slow_large_bodies_stay_within_the_memory_limit_while_a_pod_is_created_and_bound(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    """1,024 clients send ~4 MiB bodies slowly to /webhook in two waves (before the body budget
    the process grew to 3.5 GiB on a quiet machine); a GPU pod is created and bound during the
    second. Bounded: 1,024 connections, each given 40 s at most."""
    own = resource.getrlimit(resource.RLIMIT_NOFILE)
    if own[1] < WAVE + 1_000:
        pytest.skip(f"this process may open {own[1]} files, the attack needs {WAVE + 1_000}")
    nodesim(t4_node("slow-bodies"))
    control_plane.restart_app(extra_args=())  # a fresh process: its peak is this test's
    app = control_plane.app
    assert app is not None
    context = ssl.create_default_context(cafile=str(control_plane.app_tls.ca_file))
    port = control_plane.app_port
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (own[1], own[1]))
        rss_before, _ = memory_mib(app.popen.pid)
        first = asyncio.run(wave(port, context))
        with ThreadPoolExecutor(1) as pool:
            second = pool.submit(asyncio.run, wave(port, context))
            time.sleep(2)  # the second wave's bodies fill the budget
            created = time.monotonic()
            kube.apply(
                "apiVersion: v1\nkind: Pod\nmetadata: {name: during-the-bodies}\nspec:\n"
                "  containers:\n  - name: cuda\n    image: busybox\n    resources: "
                "{limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}\n",
                namespace,
            )
            kube.wait_ready(namespace, ["during-the-bodies"])
            ready_in = time.monotonic() - created
            outcomes = second.result(timeout=120)
        rss, peak = memory_mib(app.popen.pid)
        print(
            f"slow ~4 MiB bodies, first wave {dict(first)}, second {dict(outcomes)}; GPU pod "
            f"Ready {ready_in:.1f}s after its create; RSS {rss_before:.0f} MiB before, "
            f"{rss:.0f} after, peak {peak:.0f} MiB"
        )
        pod = kube.pod(namespace, "during-the-bodies")
        assert app.alive(), "hami serve died under the bodies"
        assert pod["spec"]["schedulerName"] == "hami-scheduler", "the webhook took the pod"
        assert pod["spec"].get("nodeName") == "slow-bodies"
        assert peak < MEMORY_LIMIT_MIB, f"peak RSS {peak:.0f} MiB over the chart's limit"
        assert outcomes["503"] > 0, "the second wave met a full budget during the create"
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, own)
