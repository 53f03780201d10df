"""`hami explain`: why a pod is where it is, or why it is pending, from the cluster's state.

The same engine and policies as the extender, over a cache built from one list
of nodes and pods; nothing is reserved or written.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from hami.cache.quota import QuotaBook
from hami.cache.store import ClusterCache
from hami.engine import names
from hami.engine.nodeselect import excluded
from hami.engine.policy import Defaults, PolicyError
from hami.engine.reasons import unschedulable_message
from hami.engine.requests import ResourceDefaults
from hami.service.placement import Placement


def explain(
    cache: ClusterCache,
    pod: Mapping[str, Any],
    policies: Defaults = Defaults(),
    resources: ResourceDefaults = ResourceDefaults(),
    verbose: bool = False,
    nodes: Sequence[Mapping[str, Any]] = (),
) -> list[str]:
    """`nodes` are the Node objects: kube-scheduler's own checks (selector, affinity, taints)
    rule nodes out before any GPU reason, as they do before the extender is asked."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    ref = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    annotations = meta.get("annotations") or {}
    placement = Placement(cache, policies, resources)
    bound = [
        f"{ref} is bound to {spec.get('nodeName')}",
        f"  cards: {annotations.get(names.DEVICES_ALLOCATED, '(no allocation annotation)')}",
        f"  device plugin: bind-phase {annotations.get(names.BIND_PHASE, '(not set)')}",
    ]
    try:
        asked = placement.ask(pod)
    except PolicyError as e:
        return bound if spec.get("nodeName") else [f"{ref} cannot be placed: {e}"]
    if asked is None:
        return [
            f"{ref} asks for no GPU: this scheduler leaves it to {spec.get('schedulerName') or 'default-scheduler'}"
        ]
    if spec.get("nodeName"):
        return bound
    options = asked[1]
    ruled_out = {
        str((n.get("metadata") or {}).get("name", "")): reason
        for n in nodes
        if (reason := excluded(spec, n)) is not None
    }
    everyone = {*cache.view, *cache.unregistered, *ruled_out}
    candidates = sorted(everyone - ruled_out.keys())
    namespace = str(meta.get("namespace", ""))
    decision = placement.decide(str(meta.get("uid", "")), *asked, candidates, namespace)
    failed = {**ruled_out, **decision.failed}
    lines = [
        f"{ref} is pending (GPU policy {options.gpu_policy.text!r}, node policy {options.node_policy!r})",
        *quota_lines(cache.quotas, namespace),
    ]
    if decision.node is not None:
        lines.append(f"  it fits now: node {decision.node}, cards {decision.allocation}")
    else:
        lines.append(f"  {unschedulable_message(len(everyone), failed)}")
    for node in sorted(failed):
        why = cache.unregistered.get(node) if node not in ruled_out else None
        lines.append(f"  {node}: {failed[node]}" + (f" ({why})" if why else ""))
    if verbose:
        for cs in decision.scores:
            lines.extend(
                f"  {cs.node}: device {uuid} computer score is {score:f}"
                for uuid, score in cs.items()
            )
    return lines


def quota_lines(quotas: QuotaBook, namespace: str) -> list[str]:
    """The namespace's GPU quota as it counts against this pod: limit and what is held."""
    if quotas.quota(namespace) is None:
        return []
    held = [
        f"{q.resource} {q.used} of {q.limit}"
        for q in quotas.lines()
        if q.namespace == namespace and q.limit is not None
    ]
    return [f"  namespace {namespace} GPU quota (used of limit): {', '.join(held)}"]
