"""`python -m tests.bench.memory`: RSS of `hami serve` against a real kube-apiserver.

Runs etcd and kube-apiserver on loopback (tests/e2e/cluster.py, binaries from
tests/e2e/k8sbins/build.sh), registers N GPU nodes as HAMi's device plugin would and creates
pods that hold GPU shares (allocation annotations as a bind of ours writes them, spec.nodeName
set), then starts `hami serve` once per pod count and reads its /proc/<pid>/status:

* ready: seconds and our CPU seconds from start until /readyz first answers 200 (the initial
  LIST is in the cache), and VmRSS then;
* steady: VmRSS after --settle seconds of watching an idle cluster while /metrics is read every
  --scrape-interval seconds as Prometheus reads it (gzip accepted): a scraped scheduler's size;
* peak: VmHWM, the most the process ever held, which is what start-up costs;
* scrape: the largest answer's bytes on the wire and as text, our CPU per scrape.

Pods are created through the API with a bounded pool of concurrent requests; every count is
reached from the previous one, so 0, 10k and 50k pods cost 50k creates in all. No webhook and
no kube-scheduler run: nothing but the cache's own LIST and watch is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import os
import ssl
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import orjson
import pytest

from hami.engine.model import ContainerDevice
from hami.service.annotations import allocation_annotations, allocation_labels
from tests.builders import FAMILIES
from tests.e2e.cluster import ControlPlane, Process, ensure_binaries
from tests.e2e.nodespec import (
    GPU_RESOURCE,
    REGISTER_ANNOTATION,
    NodeSpec,
    register_annotation,
    t4_node,
)

CARDS = 8
NAMESPACES = 10
MIB = 2**20


class ApiServerOnly(ControlPlane):
    """etcd and kube-apiserver; `hami serve` is started per measurement."""

    def __init__(self, bin_dir: Path, ready_timeout: float) -> None:
        super().__init__(bin_dir)
        self.ready_timeout = ready_timeout

    def _start(self) -> None:
        self._timed("etcd", self._start_etcd)
        self._timed("kube-apiserver", self._start_apiserver)

    def wait_http(
        self, process: Process, url: str, context: ssl.SSLContext | None, timeout: float
    ) -> None:
        # Listing 150k pods on two busy cores takes longer than the e2e tier allows a start.
        super().wait_http(process, url, context, max(timeout, self.ready_timeout))


@dataclass(frozen=True)
class Sample:
    pods: int
    ready_s: float
    ready_cpu: float  # our CPU seconds from start to ready
    ready_rss: int
    steady_rss: int
    peak: int
    counted: int  # GPU shares the cache counts (/metrics), to show the pods were cached
    scrape_wire: int  # bytes of the largest /metrics answer, as sent (gzip when accepted)
    scrape_text: int  # ... and of its text
    scrape_cpu: list[float]  # our CPU seconds per scrape, sorted


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of `pid` in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def node_names(nodes: int) -> list[str]:
    return [f"mem-node-{n:04d}" for n in range(nodes)]


def node_body(spec: NodeSpec) -> bytes:
    metadata = {
        "name": spec.name,
        "labels": {"gpu": "on", "kubernetes.io/hostname": spec.name},
        "annotations": {REGISTER_ANNOTATION: register_annotation(spec)},
    }
    resources = {
        "cpu": "64",
        "memory": "256Gi",
        "pods": "110",
        GPU_RESOURCE: str(spec.gpu_capacity),
    }
    # A Node's status survives its create, as a kubelet registering itself relies on.
    status = {"capacity": resources, "allocatable": resources}
    body = {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "status": status}
    return orjson.dumps(body)


def pod_body(index: int, nodes: Sequence[str], now: int) -> tuple[str, bytes]:
    """(namespace, body) of pod `index`: one 1000 MiB share of a card on a node, round-robin."""
    node = nodes[index % len(nodes)]
    card = f"GPU-{node}-{(index // len(nodes)) % CARDS}"
    namespace = f"bench-{index % NAMESPACES}"
    devices = ((ContainerDevice(card, 1000, 10),),)
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "10"}
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{index:06d}",
            "namespace": namespace,
            "labels": {"app": "memory-bench", **allocation_labels(node)},
            "annotations": allocation_annotations(node, devices, now, families=FAMILIES),
        },
        "spec": {
            "nodeName": node,
            "schedulerName": "hami-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/bench:1",
                    "command": ["sleep", "infinity"],
                    "env": [{"name": "ROLE", "value": "worker"}],
                    "resources": {"limits": limits},
                }
            ],
        },
    }
    return namespace, orjson.dumps(body)


class Loader:
    """Creates objects as cluster admin over a bounded pool of keep-alive connections."""

    def __init__(self, plane: ControlPlane, concurrency: int) -> None:
        context = ssl.create_default_context(cafile=str(plane.pki / "ca.crt"))
        context.load_cert_chain(plane.pki / "admin.crt", plane.pki / "admin.key")
        self.url = plane.apiserver_url
        self.concurrency = concurrency
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency, ssl=context), trust_env=False
        )

    async def close(self) -> None:
        await self.session.close()

    async def create(self, path: str, body: bytes) -> None:
        """POST until the server takes it; an object that exists already counts as created."""
        headers = {"Content-Type": "application/json"}
        last = ""
        for attempt in range(20):
            try:
                async with self.session.post(self.url + path, data=body, headers=headers) as resp:
                    if resp.status < 300 or resp.status == 409:
                        return
                    last = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                    if resp.status not in (429, 500, 503, 504):
                        raise RuntimeError(f"POST {path}: {last}")
            except aiohttp.ClientError as e:
                last = repr(e)  # a connection the busy server dropped: try again
            await asyncio.sleep(0.1 * (attempt + 1))
        raise RuntimeError(f"POST {path}: still failing after 20 tries: {last}")

    async def run(self, jobs: Iterator[tuple[str, bytes]], deadline: float) -> int:
        """Create every job, `concurrency` at a time, until done or `deadline`; returns count."""
        done = 0

        async def worker() -> None:
            nonlocal done
            for path, body in jobs:
                if time.monotonic() > deadline:
                    return
                await self.create(path, body)
                done += 1

        await asyncio.gather(*(worker() for _ in range(self.concurrency)))
        return done


async def populate(
    loader: Loader, nodes: Sequence[str], first: int, last: int, deadline: float
) -> int:
    now = int(time.time())

    def jobs() -> Iterator[tuple[str, bytes]]:
        for i in range(first, last):
            namespace, body = pod_body(i, nodes, now)
            yield f"/api/v1/namespaces/{namespace}/pods", body

    return first + await loader.run(jobs(), deadline)


async def prepare(loader: Loader, nodes: Sequence[str]) -> None:
    namespaces = (
        ("/api/v1/namespaces", orjson.dumps({"metadata": {"name": f"bench-{n}"}}))
        for n in range(NAMESPACES)
    )
    await loader.run(namespaces, float("inf"))
    uuids = {name: [f"GPU-{name}-{c}" for c in range(CARDS)] for name in nodes}
    await loader.run(
        (("/api/v1/nodes", node_body(t4_node(name, uuids[name]))) for name in nodes), float("inf")
    )


def cpu_seconds(pid: int) -> float:
    """User and system CPU `pid` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Scraper(threading.Thread):
    """Reads /metrics every `interval` seconds as Prometheus does (gzip accepted), recording the
    bytes on the wire, the text's size and the CPU the process spent answering."""

    def __init__(self, url: str, pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.url, self.pid, self.interval = url, pid, interval
        self.stopped = threading.Event()
        self.wire: list[int] = []
        self.text: list[int] = []
        self.cpu: list[float] = []
        self.last = ""

    def scrape(self) -> None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        request = urllib.request.Request(self.url, headers={"Accept-Encoding": "gzip"})
        before = cpu_seconds(self.pid)
        with opener.open(request, timeout=60) as response:
            body = response.read()
            zipped = response.headers.get("Content-Encoding") == "gzip"
        # Counted until the last byte arrived; an idle cluster's watches cost next to nothing.
        self.cpu.append(cpu_seconds(self.pid) - before)
        self.wire.append(len(body))
        text = gzip.decompress(body) if zipped else body
        self.text.append(len(text))
        self.last = text.decode()

    def run(self) -> None:
        # The first read an interval after ready, not at once: Prometheus spreads a new
        # target's first scrape over its interval, and hami serve builds the series of the
        # first scrape right after its cache syncs (hami.runtime.chores.freeze_heap).
        while not self.stopped.wait(self.interval):
            self.scrape()

    def stop(self) -> None:
        self.stopped.set()
        self.join()


def measure(plane: ControlPlane, pods: int, settle: float, interval: float) -> Sample:
    started = time.monotonic()
    # No admission policy on this bare plane: nothing but the cache is measured.
    plane.start_app(["--log-level", "warning", "--allow-without-admission-policy=true"])
    ready_s = time.monotonic() - started
    app = plane.app
    assert app is not None
    ready = proc_status(app.popen.pid)
    ready_cpu = cpu_seconds(app.popen.pid)
    # Scraped from ready on, as a Prometheus would: what the exposition costs belongs to steady.
    scraper = Scraper(plane.metrics_url, app.popen.pid, interval)
    scraper.start()
    time.sleep(settle)
    scraper.stop()
    steady = proc_status(app.popen.pid)
    plane.stop_app()
    return Sample(
        pods,
        ready_s,
        ready_cpu,
        ready["VmRSS"],
        steady["VmRSS"],
        steady["VmHWM"],
        shares_counted(scraper.last),
        max(scraper.wire, default=0),
        max(scraper.text, default=0),
        sorted(scraper.cpu),
    )


def shares_counted(text: str) -> int:
    prefix = "hami_gpu_shared_count{"
    return int(
        sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))
    )


def report(samples: Sequence[Sample], nodes: int) -> str:
    base = samples[0].steady_rss if samples and samples[0].pods == 0 else None
    lines = [
        f"hami serve memory, {nodes} nodes x {CARDS} cards, pods holding one GPU share each "
        "(MiB; steady with /metrics scraped):",
        f"  {'pods':>7} {'ready s':>8} {'CPU s':>6} {'ready':>8} {'steady':>8} {'peak':>8} "
        f"{'peak/steady':>11} {'per 10k pods':>13} {'counted':>8} "
        f"{'scrape MB wire/text':>20} {'scrape CPU ms p50/max (n)':>26}",
    ]
    for s in samples:
        per10k = (
            f"{(s.steady_rss - base) / MIB / s.pods * 10_000:13.1f}"
            if base is not None and s.pods
            else f"{'':13}"
        )
        cpu = s.scrape_cpu or [float("nan")]
        scrape_cpu = f"{cpu[len(cpu) // 2] * 1000:.0f}/{cpu[-1] * 1000:.0f} ({len(s.scrape_cpu)})"
        scrape_mb = f"{s.scrape_wire / 1e6:.1f}/{s.scrape_text / 1e6:.1f}"
        lines.append(
            f"  {s.pods:>7} {s.ready_s:8.1f} {s.ready_cpu:6.1f} {s.ready_rss / MIB:8.1f} "
            f"{s.steady_rss / MIB:8.1f} {s.peak / MIB:8.1f} {s.peak / s.steady_rss:11.2f} "
            f"{per10k} {s.counted:8} {scrape_mb:>20} {scrape_cpu:>26}"
        )
    return "\n".join(lines)


async def run(plane: ControlPlane, args: argparse.Namespace) -> list[Sample]:
    counts = sorted({int(c) for c in args.pods.split(",")})
    names = node_names(args.nodes)
    loader = Loader(plane, args.concurrency)
    samples: list[Sample] = []
    try:
        await prepare(loader, names)
        have = 0
        deadline = time.monotonic() + args.create_budget
        for want in counts:
            if want > have:
                t0 = time.monotonic()
                reached = await populate(loader, names, have, want, deadline)
                rate = (reached - have) / max(time.monotonic() - t0, 1e-9)
                print(f"  {reached} pods ({rate:.0f} creates/s)", file=sys.stderr, flush=True)
                have = reached
            # start_app blocks until /readyz answers; the loop has nothing else to do meanwhile.
            samples.append(
                await asyncio.to_thread(measure, plane, have, args.settle, args.scrape_interval)
            )
            print(report(samples[-1:], args.nodes).splitlines()[-1], file=sys.stderr, flush=True)
            if have < want:
                print(f"  stopped at {have} pods: out of creation time", file=sys.stderr)
                break
    finally:
        await loader.close()
    return samples


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tests.bench.memory",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods", default="0,10000,50000", help="comma-separated pod counts")
    p.add_argument("--settle", type=float, default=20.0, help="seconds from ready to steady")
    p.add_argument(
        "--scrape-interval", type=float, default=5.0, help="seconds between /metrics reads"
    )
    p.add_argument("--concurrency", type=int, default=48, help="creates in flight")
    p.add_argument(
        "--create-budget", type=float, default=900.0, help="seconds at most spent creating pods"
    )
    p.add_argument(
        "--ready-timeout", type=float, default=300.0, help="seconds `hami serve` may take to sync"
    )
    p.add_argument("--json", help="also write each sample's figures to this file")
    args = p.parse_args(argv)
    counts = [int(c) for c in args.pods.split(",")]
    if args.nodes > 5_000 or max(counts) > 150_000:
        p.error("bounded: at most 5,000 nodes and 150,000 pods (Kubernetes' tested envelope)")
    try:
        bins = ensure_binaries()
    except pytest.skip.Exception as e:
        print(f"memory bench: {e}", file=sys.stderr)
        return 2
    with ApiServerOnly(bins, args.ready_timeout) as plane:
        print(f"memory bench: run folder {plane.run_dir}", file=sys.stderr, flush=True)
        samples = asyncio.run(run(plane, args))
    print(report(samples, args.nodes))
    if args.json:
        Path(args.json).write_bytes(
            orjson.dumps([asdict(s) for s in samples], option=orjson.OPT_INDENT_2)
        )
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
