"""What a namespace quota costs a decision: `schedule()` on a large synthetic cluster.

    python -m tests.bench.quota --nodes 1000 --cards 8

Rows: no quota; a quota the pod fits; a quota the pod is over on every card (every card of
every node is walked, since HAMi's reason counts each card's verdict), with the pod's shape
changing each run so that no node's remembered fit helps; the same pod retried unchanged
(what kube-scheduler's retries of a pending pod cost). Prints p50 and p99 in milliseconds.
"""

from __future__ import annotations

import argparse
import time

from hami.bench.cluster import build_cluster
from hami.engine.decide import schedule
from hami.engine.model import ContainerRequest, PodRequest
from hami.engine.policy import pod_options
from hami.engine.quota import NamespaceQuota, QuotaLimits, QuotaUsage
from tests.builders import FAMILIES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--cards", type=int, default=8)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args(argv)
    cache = build_cluster(args.nodes, args.cards, args.nodes * 4, 7)
    names = sorted(cache.view)
    options = pod_options({})
    roomy = NamespaceQuota(QuotaLimits(memory=10**6), QuotaUsage(5 * 10**5))
    full = NamespaceQuota(QuotaLimits(memory=10**5), QuotaUsage(10**5 - 10))
    rows: list[tuple[str, NamespaceQuota | None, bool]] = [
        ("no quota", None, True),
        ("quota, pod fits", roomy, True),
        ("quota, pod over it on every card", full, True),
        ("quota, pod over it, retried unchanged", full, False),
    ]
    print(f"schedule() on {args.nodes} nodes x {args.cards} cards, {args.runs} runs per row")
    for label, quota, vary in rows:
        samples = []
        for i in range(args.runs):
            request = PodRequest(app=(ContainerRequest(1, memreq=1000 + (i if vary else 0)),))
            start = time.perf_counter()
            schedule(cache.view, request, options, names, quota, families=FAMILIES)
            samples.append(time.perf_counter() - start)
        samples.sort()
        p50, p99 = (
            samples[len(samples) // 2],
            samples[min(len(samples) - 1, len(samples) * 99 // 100)],
        )
        print(f"  {label:40s} p50 {p50 * 1e3:7.2f} ms  p99 {p99 * 1e3:7.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
