"""What the scheduler believes of a pod's GPUs: what it bound, not what was written later.

A pod's allocation annotations can be edited by anyone who may patch pods, unless the chart's
admission policy stops them. The cache therefore counts:

* a bound pod by the allocation it carried when first seen bound, for the rest of its life:
  later changes and removal are ignored (and reported), because the device plugin allocated
  what was there at bind and the card is still in use;
* an allocation that cannot be ours (another node, a card the node does not have, more cards
  than asked for, no GPU asked for) as nothing of ours: a bound pod carrying one, like a bound
  pod with none, is counted as the kubelet's whole cards (hami.engine.outside);
* an unbound pod's allocation only while the node's lock names the pod (a bind of HAMi or of
  an older release of ours, which wrote the allocation before the Binding, is under way); a
  bind of this release holds its cards by its reservation, and its Binding carries the
  allocation, so an unbound pod with one and no lock is a bind given up, or a forgery;
* a pod whose `nvidia.com/gpu` kube-scheduler served through a DeviceClass's
  `extendedResourceName` (KEP-5004: `status.extendedResourceClaimStatus` names the claim it
  made) by that claim alone, on the books of hami.cache.dra: the kubelet hands the pod the
  claim's devices, not the device plugin's, so neither an allocation written by our bind nor
  the whole cards of an outside pod hold a card of its.

`observe` turns a pod event into the record kept; `count` decides from the record and the
node how the pod is counted. Both are pure: the cache calls them on every pod event and
again when a node's cards or lock change.
"""

import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from hami.engine.asks import pod_request
from hami.engine.codec import encode_pod_devices
from hami.engine.families.registry import Families
from hami.engine.inventory import (
    PodAllocation,
    init_done,
    is_terminal,
    placement_of,
    pod_allocation,
)
from hami.engine.model import PodRequest
from hami.engine.outside import OutsideClaim, kubelet_gpus
from hami.engine.requests import RequestError, ResourceDefaults, names_gpu
from hami.engine.vetting import Vetted, vet_allocation


@dataclass(frozen=True, slots=True)
class Seen:
    """A live pod that carries an allocation or, bound, holds GPUs: what counting it takes."""

    uid: str
    namespace: str
    name: str
    scheduler: str  # spec.schedulerName, for explaining a pod outside the scheduler
    bound_to: str  # spec.nodeName, "" while unbound
    # Once bound: the allocation first seen bound (None: bound without one), whatever is
    # written later. While unbound: as written.
    written: PodAllocation | None
    request: PodRequest | None  # what its spec asks for; None when unreadable
    unreadable: str  # why the request cannot be read
    gpus: int  # nvidia.com/gpu the kubelet gives it
    fixed: bool  # bound: `written` no longer follows the annotations
    # The other families' devices the kubelet gives it: (FamilyWire.type, how many).
    family_gpus: tuple[tuple[str, int], ...] = ()
    # The claim kube-scheduler made for its `nvidia.com/gpu` (KEP-5004); "" when none did.
    served_by: str = ""

    def nodes(self) -> set[str]:
        """The nodes whose cards or lock decide how the pod is counted."""
        return {n for n in (self.bound_to, self.written and self.written.node) if n}


@dataclass(frozen=True, slots=True)
class Counted:
    own: PodAllocation | None = None  # counted as an allocation of ours
    outside: OutsideClaim | None = None  # counted as the kubelet's whole cards
    problem: str = ""  # why the allocation written was not counted as written


def observe(
    pod: Mapping[str, Any],
    before: Seen | None,
    resources: ResourceDefaults,
    families: Families,
) -> tuple[Seen | None, str]:
    """The record to keep for a pod event (None: nothing to count), and, for a bound pod whose
    allocation was changed or removed since it was bound, what was ignored ("" otherwise)."""
    if is_terminal(pod):
        return None, ""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    raw = pod_allocation(pod, families)
    bound_to = str(spec.get("nodeName") or "")
    served_by = extended_claim(pod, resources.names.gpu)
    if before is not None and before.served_by != served_by:
        before = replace(before, served_by=served_by)
    if before is not None and before.fixed:
        fixed = before.written
        if raw is not None and fixed is not None and placement_of(raw) == placement_of(fixed):
            # The same decision; the device plugin's records and the pod's status come with it.
            return replace(before, written=raw), ""
        if raw is None and fixed is None:
            return before, ""
        kept = None if fixed is None else replace(fixed, init_done=init_done(pod, fixed.n_init))
        return replace(before, written=kept), ignored_edit(fixed, raw)
    gpus = kubelet_gpus(spec, resources.names.gpu)
    family_gpus = _family_gpus(spec, families) if bound_to else ()
    if raw is None and not (bound_to and (gpus > 0 or family_gpus)):
        return None, ""
    try:
        request: PodRequest | None = pod_request(spec, resources, families=families)
        unreadable = ""
    except RequestError as e:
        request, unreadable = None, str(e)
    seen = Seen(
        uid=str(meta.get("uid", "")),
        namespace=sys.intern(str(meta.get("namespace", ""))),
        name=str(meta.get("name", "")),
        scheduler=str(spec.get("schedulerName") or "default-scheduler"),
        bound_to=sys.intern(bound_to),
        written=raw,
        request=request,
        unreadable=unreadable,
        gpus=gpus,
        family_gpus=family_gpus,
        fixed=bool(bound_to),
        served_by=served_by,
    )
    return seen, ""


def extended_claim(pod: Mapping[str, Any], gpu_resource: str) -> str:
    """The claim kube-scheduler made to serve the pod's `gpu_resource` through DRA (KEP-5004);
    "" when the device plugin serves it."""
    status = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    if not isinstance(status, Mapping):
        return ""
    mappings = status.get("requestMappings") or ()
    if not any(isinstance(m, Mapping) and m.get("resourceName") == gpu_resource for m in mappings):
        return ""
    return str(status.get("resourceClaimName") or "")


def _family_gpus(spec: Mapping[str, Any], families: Families) -> tuple[tuple[str, int], ...]:
    """The other families' devices the kubelet gives the pod, by type (none for most pods:
    the resource names its containers ask for tell, without a pass per family)."""
    named = _named_resources(spec)
    if families.other_resource_set.isdisjoint(named):
        return ()
    out = []
    for family in families.others:
        if family.wire.resources.count not in named:
            continue
        n = kubelet_gpus(spec, family.wire.resources.count)
        if n > 0:
            out.append((family.wire.type, n))
    return tuple(out)


def _named_resources(spec: Mapping[str, Any]) -> set[str]:
    """Every resource some container (init ones too) limits or requests."""
    named: set[str] = set()
    for c in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ())):
        resources = c.get("resources") or {}
        named.update(resources.get("limits") or (), resources.get("requests") or ())
    return named


def ignored_edit(fixed: PodAllocation | None, now: PodAllocation | None) -> str:
    if fixed is None:
        return (
            "an allocation was written after the pod was bound without one; the scheduler "
            "keeps counting it as a pod outside the scheduler (whole cards)"
        )
    was = f"{encode_pod_devices(fixed.devices)} on node {fixed.node}"
    if now is None:
        return (
            f"its allocation annotations were removed after it was bound; the scheduler keeps "
            f"counting what it was bound with: {was}"
        )
    return (
        f"its allocation was changed after it was bound (to {encode_pod_devices(now.devices)} "
        f"on node {now.node}); the scheduler keeps counting what it was bound with: {was}"
    )


def count(
    seen: Seen, devmem: Mapping[str, int] | None, lock_holder: tuple[str, str] | None
) -> Counted:
    """How to count the pod: `devmem` are the cards of the node its allocation names (None
    while unknown), `lock_holder` the pod that node's lock names."""
    alloc, problem = seen.written, ""
    gpus = seen.gpus
    if seen.served_by:
        # The claim holds its cards (hami.cache.dra counts it): counting the pod too would
        # take each card twice.
        alloc, gpus = None, 0
    if alloc is not None:
        verdict = (
            Vetted(None, seen.unreadable)
            if seen.request is None
            else vet_allocation(alloc, seen.bound_to, seen.request, devmem)
        )
        alloc, problem = verdict.allocation, verdict.problem
    if seen.bound_to:
        if alloc is not None:
            return Counted(own=alloc, problem=problem)
        if gpus <= 0 and not seen.family_gpus:
            return Counted(problem=problem)
        why = (
            f"bound by {seen.scheduler} without an allocation of this scheduler"
            if seen.written is None or seen.served_by
            else f"its allocation is not counted: {problem}"
        )
        claim = OutsideClaim(
            seen.uid, seen.namespace, seen.name, seen.bound_to, gpus, why, seen.family_gpus
        )
        return Counted(outside=claim, problem=problem)
    if alloc is not None and lock_holder == (seen.namespace, seen.name):
        return Counted(own=alloc, problem=problem)
    return Counted(problem=problem)


def asks_for_no_card(
    pod: Mapping[str, Any], resources: ResourceDefaults, families: Families
) -> bool:
    """True for a pod that names a GPU resource but asks for no card (`nvidia.com/gpu: 0`
    beside a gpumem) and carries no allocation: HAMi lets such a pod through filter and bind
    without one. A pod that names no GPU resource is never sent to the extender, and one
    carrying an allocation that did not add up is no decision of ours."""
    if pod_allocation(pod, families) is not None:
        return False
    spec = pod.get("spec") or {}
    try:
        named = names_gpu(spec, resources.names)
        return named and not pod_request(spec, resources, families=families).wants_gpu
    except RequestError:
        return False
