"""`python -m tests.bench.exposition`: the cache fill and /metrics at the envelope, in-process.

    python -m tests.bench.exposition --nodes 5000 --pods 150000

Builds the memory bench's nodes and pods (8 cards a node, one 1000 MiB share a pod, the
allocation annotations a bind of ours writes) as the decoded JSON a LIST gives, fills a
ClusterCache page by page as the informer does, and renders the scrape Prometheus would get
(gzip asked): after start-up, again unchanged, and after new pods on a number of nodes. Prints
CPU seconds: no API server, no network, so the figures are the cache's and the exposition's.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import time
from collections.abc import Sequence

import orjson

from hami.cache.store import ClusterCache
from hami.engine.requests import ResourceDefaults
from hami.kube.listwatch import LIST_PAGE
from hami.runtime.config import Settings
from hami.runtime.metrics import Metrics
from tests.bench.memory import CARDS, node_body, node_names, pod_body
from tests.builders import FAMILIES
from tests.e2e.nodespec import t4_node


def objects(nodes: int, pods: int) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    names = node_names(nodes)
    node_objs = [
        orjson.loads(node_body(t4_node(n, [f"GPU-{n}-{c}" for c in range(CARDS)]))) for n in names
    ]
    now = int(time.time())
    pod_objs = []
    for i in range(pods):
        pod = orjson.loads(pod_body(i, names, now)[1])
        pod["metadata"] |= {"uid": f"uid-{i}", "resourceVersion": str(10 + i)}
        pod_objs.append(pod)
    return node_objs, pod_objs


def scrape(metrics: Metrics) -> tuple[float, int, int]:
    """(CPU seconds, bytes sent, bytes of text) of one scrape that asks for gzip."""
    started = time.process_time()
    body = b"".join(metrics.render(metrics.snapshot(), gzip=True))
    return time.process_time() - started, len(body), len(gzip.decompress(body))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.exposition", description=__doc__)
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods", type=int, default=150_000)
    p.add_argument("--changed", type=int, default=300, help="nodes given a new pod between scrapes")
    args = p.parse_args(argv)
    node_objs, pod_objs = objects(args.nodes, args.pods)
    cache = ClusterCache(time.monotonic, families=FAMILIES, resources=ResourceDefaults())
    started = time.process_time()
    cache.replace_nodes(node_objs)
    first = True
    for i in range(0, len(pod_objs), LIST_PAGE):
        page = pod_objs[i : i + LIST_PAGE]
        if first:
            cache.replace_pods(page)
            first = False
        else:
            for pod in page:
                cache.upsert_pod(pod)
    cache.settle()
    fill = time.process_time() - started
    gc.collect()
    gc.freeze()  # as hami serve does once synced: the start-up heap is not scanned again
    print(
        f"cache fill, {args.nodes} nodes x {CARDS} cards, {args.pods} pods: {fill:.2f} s CPU "
        f"({fill / max(1, args.pods) * 1e6:.0f} us a pod)"
    )
    # As `hami serve` runs by default: per-pod series left out past the limit.
    limit = Settings().metrics_pod_series_limit
    metrics = Metrics(cache, lambda: 0.0, lambda: 0, pod_limit=limit)
    for label, change in (
        ("first scrape", False),
        ("unchanged", False),
        (f"{args.changed} nodes changed", True),
    ):
        if change:
            for n, pod in enumerate(pod_objs[: args.changed]):
                meta = pod["metadata"]
                assert isinstance(meta, dict)
                cache.upsert_pod(pod | {"metadata": meta | {"uid": f"new-{n}", "name": f"n-{n}"}})
        cpu, sent, text = scrape(metrics)
        print(
            f"  {label:20} {cpu * 1000:6.0f} ms CPU, {sent / 1e6:5.1f} MB sent, {text / 1e6:5.1f} MB text"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
