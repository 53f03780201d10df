"""`hami explain`: why a pod is where it is, or why it is pending, from the cluster's state.

The same engine and policies as the extender, over a cache built from one list
of nodes and pods; nothing is reserved or written.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from hami.cache.quota import QuotaBook
from hami.cache.store import ClusterCache
from hami.engine import names, nvidianames, reasons
from hami.engine.codec import CodecError
from hami.engine.dra.config import DEFAULT_CLASSES, DraClass, unpublished
from hami.engine.dra.translate import GATE, TranslateError, restore
from hami.engine.mig import blocked, label
from hami.engine.migalloc import allocations, decode_allocations
from hami.engine.model import NodeState, PodRequest
from hami.engine.nodeselect import excluded
from hami.engine.policy import Defaults, PolicyError
from hami.engine.reasons import unschedulable_message
from hami.engine.requests import ResourceDefaults
from hami.service.advertised import node_shortfall
from hami.service.annotations import written_cards
from hami.service.draplacer import gated
from hami.service.placement import Placement


def explain(
    cache: ClusterCache,
    pod: Mapping[str, Any],
    policies: Defaults,
    resources: ResourceDefaults,
    verbose: bool = False,
    nodes: Sequence[Mapping[str, Any]] = (),
    dra_classes: Sequence[DraClass] = DEFAULT_CLASSES,
) -> list[str]:
    """`nodes` are the Node objects: kube-scheduler's own checks (selector, affinity, taints)
    rule nodes out before any GPU reason, as they do before the extender is asked.
    `dra_classes` are serve's (--dra-device-classes): a gated pod with no node to go to is
    told which of them publish nothing."""
    meta = pod.get("metadata") or {}
    ref = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    # A pod behind DRA mode's gate is the placer's: its request as written, decided as the
    # placer decides it, over the cards DRA drivers publish (hami.service.draplacer).
    waiting = gated(pod)
    if waiting:
        try:
            pod = restore(pod)
        except TranslateError as e:
            return [f"{ref} cannot be placed: {e}"]
    spec = pod.get("spec") or {}
    annotations = meta.get("annotations") or {}
    placement = Placement(cache, policies, resources, states=cache.dra_view if waiting else None)
    short = node_shortfall(cache, str(spec.get("nodeName", "")))
    bound = [
        f"{ref} is bound to {spec.get('nodeName')}",
        f"  cards: {written_cards(annotations, cache.families) or '(no allocation annotation)'}",
        *written_instances(annotations.get(nvidianames.MIG_ALLOCATIONS)),
        f"  device plugin: bind-phase {annotations.get(names.BIND_PHASE, '(not set)')}",
        *([f"  warning: {short}"] if short else []),
    ]
    try:
        asked = placement.ask(pod)
    except PolicyError as e:
        if spec.get("nodeName"):
            return bound + outside_pod_lines(cache, str(meta.get("uid", "")))
        return [f"{ref} cannot be placed: {e}"]
    if asked is None:
        return [
            f"{ref} asks for no GPU: this scheduler leaves it to {spec.get('schedulerName') or 'default-scheduler'}"
        ]
    if spec.get("nodeName"):
        return bound + outside_pod_lines(cache, str(meta.get("uid", "")))
    options = asked[1]
    ruled_out = {
        str((n.get("metadata") or {}).get("name", "")): reason
        for n in nodes
        if (reason := excluded(spec, n)) is not None
    }
    everyone = set(cache.dra.nodes()) if waiting else {*cache.view, *cache.unregistered, *ruled_out}
    if waiting:  # the placer decides over the nodes a DRA driver publishes cards of
        ruled_out = {n: why for n, why in ruled_out.items() if n in everyone}
    candidates = sorted(everyone - ruled_out.keys())
    namespace = str(meta.get("namespace", ""))
    decision = placement.decide(str(meta.get("uid", "")), *asked, candidates, namespace)
    failed = {**ruled_out, **decision.failed}
    lines = [
        f"{ref} is pending (GPU policy {options.gpu_policy.text!r}, node policy {str(options.node_policy)!r})",
        *quota_lines(cache.quotas, namespace),
        *([f"  it waits for the DRA placer (scheduling gate {GATE})"] if waiting else []),
    ]
    if decision.node is not None:
        lines.append(f"  it fits now: node {decision.node}, cards {decision.allocation}")
        if decision.devices is not None:
            lines.extend(
                f"  MIG: container {a.container} card {a.gpu} would get {label(a.instance)}"
                for a in allocations(decision.devices)
            )
    elif waiting and not everyone:
        lines.append(f"  {unpublished(dra_classes, asked[0])}")
    else:
        lines.append(f"  {unschedulable_message(len(everyone), failed)}")
    for node in sorted(failed):
        # A DRA node needs no device plugin registration: its "unregistered" is no reason.
        why = None if waiting or node in ruled_out else cache.unregistered.get(node)
        lines.append(f"  {node}: {failed[node]}" + (f" ({why})" if why else ""))
        lines.extend(outside_node_lines(cache, node))
        lines.extend(dra_node_lines(cache, node))
        state = cache.view.get(node)
        if state is not None and reasons.CARD_MIG_TOPOLOGY_INFEASIBLE in failed[node]:
            lines.extend(placement_lines(state, asked[0]))
    if verbose:
        for cs in decision.scores:
            lines.extend(
                f"  {cs.node}: device {uuid} computer score is {score:f}"
                for uuid, score in cs.items()
            )
    return lines


def outside_pod_lines(cache: ClusterCache, uid: str) -> list[str]:
    """For a bound pod counted as the kubelet's whole cards: how many, and why."""
    claim = cache.claim(uid)
    if claim is None:
        return []
    return [
        f"  counted as {_cards(claim.cards)} of {claim.node} held outside this scheduler: "
        f"{claim.why} (the kubelet gives it that many devices, with no slice)"
    ]


def outside_node_lines(cache: ClusterCache, node: str) -> list[str]:
    """The pods holding cards of `node` that the scheduler did not place."""
    return [
        f"    {_cards(c.cards)} held by {c.namespace}/{c.name}, outside this scheduler: {c.why}"
        for c in sorted(cache.outside(node), key=lambda c: (c.namespace, c.name))
    ]


def dra_node_lines(cache: ClusterCache, node: str) -> list[str]:
    """The allocated DRA claims holding cards of `node`, and which world each card is in."""
    registered = {c.info.id for c in s.all_cards()} if (s := cache.view.get(node)) else set()
    return [
        f"    {u.usedmem} MiB, {u.usedcores}% cores of {uuid} "
        f"({'also the device plugin' if uuid in registered else 'a DRA driver'}'s card) "
        f"held by DRA claim {namespace}/{claim}"
        for namespace, claim, usage in cache.dra.claims_on(node)
        for uuid, u in sorted(usage.items())
    ]


def _cards(n: int) -> str:
    return f"{n} whole card{'' if n == 1 else 's'}"


def written_instances(value: str | None) -> list[str]:
    """The pod's MIG instances: profile and slices, and whether the device plugin made them."""
    try:
        entries = decode_allocations(value or "")
    except CodecError as e:
        return [f"  MIG: {nvidianames.MIG_ALLOCATIONS} cannot be read ({e})"]
    lines = []
    for a in entries:
        i = a.instance
        made = (
            f"instance {i.uuid} (GPU instance {i.gpu_instance}, compute instance "
            f"{i.compute_instance})"
            if i.ready
            else "not created by the device plugin yet"
        )
        lines.append(f"  MIG: container {a.container} card {a.gpu}: {label(i)}, {made}")
    return lines


def placement_lines(node: NodeState, request: PodRequest) -> list[str]:
    """Why no MIG profile fits: each MIG card's instances and, per container ask, what every
    placement of a profile that would hold it overlaps."""
    lines = []
    asks = dict.fromkeys(r for r in (*request.init, *request.app) if r is not None)
    for card in node.cards:
        if not card.info.mig:
            continue
        held = ", ".join(label(i) for i in card.usage.mig) or "no instance"
        lines.append(f"    card {card.info.index} {card.info.id} (MIG): {held}")
        for ask in asks:
            memory, cores = ask.memory_on(card.info.share_base), min(ask.coresreq, 100)
            tried = blocked(card, memory, cores)
            lines.append(
                f"      for {memory} MiB and {cores} % of the cores: "
                + (" | ".join(tried) if tried else "no profile is that large")
            )
    return lines


def quota_lines(quotas: QuotaBook, namespace: str) -> list[str]:
    """The namespace's GPU quota as it counts against this pod: limit and what is held."""
    if quotas.quota(namespace) is None and quotas.family_quota(namespace) is None:
        return []
    held = [
        f"{q.resource} {q.used} of {q.limit}"
        for q in quotas.lines()
        if q.namespace == namespace and q.limit is not None
    ]
    return [f"  namespace {namespace} GPU quota (used of limit): {', '.join(held)}"]
