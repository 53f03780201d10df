"""`hami explain NAMESPACE/NAME`: one list of nodes and pods, then the explanation."""

import argparse
import asyncio
import sys
import time
from typing import Any

from hami.engine.policy import PolicyError, parse_gpu_policy, parse_node_policy
from hami.kube.client import Kube
from hami.kube.connect import connect
from hami.kube.errors import KubeError
from hami.runtime.choices import of_flags
from hami.runtime.logs import one_line
from hami.runtime.status import read_dra
from hami.service.explain import explain
from hami.service.preemption.lines import preemption_lines


async def _run(args: argparse.Namespace) -> list[str]:
    namespace, _, name = args.pod.partition("/")
    if not name:
        raise ValueError(f"{args.pod!r}: give the pod as NAMESPACE/NAME")
    if args.gfd_split_count < 0:
        raise ValueError("--gfd-split-count must not be negative (0 switches it off)")
    if not args.request_timeout > 0:
        raise ValueError("--request-timeout must be more than 0 seconds")
    choices = of_flags(args, "explain")
    wait = args.request_timeout
    kube = Kube(await connect(args.kubeconfig or None), timeout=wait, list_timeout=wait)
    try:
        pod = await kube.get_pod(namespace, name)
        if pod is None:
            raise ValueError(f"pod {namespace}/{name} not found")
        nodes, _ = await kube.list_objects("nodes")
        pods, _ = await kube.list_objects("pods")
        quotas, _ = await kube.list_objects("resourcequotas")
        try:
            budgets: list[dict[str, Any]] | None = await kube.list_pod_disruption_budgets()
        except KubeError:
            budgets = None  # preemption is explained without them, and says so
        # A read of the cluster as it is: no decision of this command's is held, none expires.
        cache = choices.cache(time.monotonic, locks=choices.locks(), reservation_ttl=float("inf"))
        await read_dra(kube, cache)
    finally:
        await kube.close()
    cache.replace_nodes(nodes)
    cache.quotas.replace(quotas)
    cache.replace_pods(pods)
    policies, resources = choices.policies, choices.resources
    lines = explain(
        cache,
        pod,
        policies,
        resources,
        verbose=args.verbose,
        nodes=nodes,
        dra_classes=choices.dra_classes,
    )
    return lines + preemption_lines(
        cache, pods, budgets, pod, policies, resources, enabled=args.preemption
    )


def explain_pod(args: argparse.Namespace) -> int:
    try:
        parse_gpu_policy(args.gpu_scheduler_policy)
        parse_node_policy(args.node_scheduler_policy)
        lines = asyncio.run(_run(args))
    except (PolicyError, ValueError, KubeError, OSError) as e:
        print(f"hami explain: {one_line(e)}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0
