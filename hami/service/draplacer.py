"""HAMi's card policies on DRA devices: the leader places each pod the webhook's DRA mode gated
(docs/dra.md, "Which card").

For each gated pod it restores the pod's request from its record, chooses node and cards with
the same engine decision `/filter` makes (hami.service.placement, which also holds the cards
in the cache until the claim's allocation is counted), creates each container's claim pinned to
the chosen cards and owned by the pod, then lifts the gate. kube-scheduler's DynamicResources
plugin then allocates exactly those cards or none: never past a card's capacity.

All its state is in the API: a new or restarted leader finds the pods still gated, and a claim
already made (create answers Conflict) is kept if the pod owns it, so a placement interrupted
anywhere is finished, never made twice.
"""

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from hami.engine.dra.claimspec import SelectorError, UnpublishedCardError
from hami.engine.dra.config import DraConfig, unpublished
from hami.engine.dra.translate import (
    GATE,
    REQUESTS,
    TranslateError,
    entry_name,
    pinned_claims,
    recorded,
    restore,
)
from hami.engine.nodeselect import excluded
from hami.engine.requests import RequestError
from hami.kube.api import KubeAPI
from hami.kube.errors import Conflict, KubeError, NotFound
from hami.service.placement import FilterOutcome, Placement

log = logging.getLogger(__name__)
Key = tuple[str, str, str]  # namespace, name, uid
# kube-scheduler's DynamicResources plugin, when a pod's claims cannot all be allocated.
UNALLOCATABLE = "cannot allocate all claims"


# What the placer writes over kube-scheduler's refusal of a stranded pod once it acts on it, so
# the refusal is taken for the claims it was about and no later ones; kube-scheduler writes
# its own condition again at its next attempt.
REPINNING = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "the DRA placer is pinning the pod's claims to another card "
    f"(scheduling gate {GATE}'s placement); kube-scheduler tries it again once they exist",
}


def gated(pod: Mapping[str, Any]) -> bool:
    """Whether the pod waits for the placer: its record, our gate, not being deleted."""
    meta = pod.get("metadata") or {}
    gates = (pod.get("spec") or {}).get("schedulingGates") or ()
    return (
        REQUESTS in (meta.get("annotations") or {})
        and any(g.get("name") == GATE for g in gates)
        and not meta.get("deletionTimestamp")
    )


def stranded(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's gate is gone but kube-scheduler could not allocate its pinned claims:
    the card filled up after the placer chose it (the claim is deleted and placed again)."""
    meta = pod.get("metadata") or {}
    if REQUESTS not in (meta.get("annotations") or {}) or meta.get("deletionTimestamp"):
        return False
    spec = pod.get("spec") or {}
    if spec.get("nodeName") or any(
        g.get("name") == GATE for g in spec.get("schedulingGates") or ()
    ):
        return False
    return any(
        c.get("type") == "PodScheduled"
        and c.get("reason") == "Unschedulable"
        and UNALLOCATABLE in str(c.get("message"))
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def decide(
    placement: Placement, written: Mapping[str, Any], nodes: Sequence[str], dra: DraConfig
) -> FilterOutcome:
    """The placer's decision for the restored pod `written` over `nodes` (those DRA drivers
    publish cards on), as the placer, `hami simulate` and `hami explain` take it: with no such
    node, kube-scheduler's sentence would name no reason (`0/0 nodes are available: .`), so
    the outcome's error says which DeviceClass and driver publish nothing. Only nodes
    kube-scheduler could bind the pod to are chosen among (nodeSelector, required node affinity,
    taints, cordon): a card elsewhere would pin its claim where the pod never goes, and leave it
    Pending while counted as placed."""
    spec, fences = written.get("spec") or {}, placement.cache.fences
    ruled_out = {
        node: why
        for node in nodes
        if (fence := fences.get(node)) is not None and (why := excluded(spec, fence))
    }
    outcome = placement.filter(written, [n for n in nodes if n not in ruled_out])
    if ruled_out and not outcome.node_names:
        outcome = replace(outcome, failed={**ruled_out, **outcome.failed})
    # The ask is read again only where filter read it without error: it raises nothing then.
    if nodes or outcome.error or (asked := placement.ask(written)) is None:
        return outcome
    return replace(outcome, error=unpublished(dra.classes, asked[0]), decision=None)


def _key(pod: Mapping[str, Any]) -> Key:
    meta = pod.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", "")))


class DraPlacer:
    def __init__(
        self,
        kube: KubeAPI,
        placement: Placement,
        dra: DraConfig,
        leading: Callable[[], bool],
        nodes: Callable[[], Sequence[str]],
        *,
        scheduler_name: str,
        report: Callable[[FilterOutcome], None],
        retry_seconds: float = 2.0,
        most_seconds: float = 60.0,
    ) -> None:
        self.kube = kube
        self.placement = placement
        self.dra = dra
        self.leading = leading
        self.nodes = nodes
        # Only our own pods: a second install in DRA mode (another schedulerName) gates and
        # places its pods with the same gate and record, and must not be raced for them.
        self.scheduler_name = scheduler_name
        # What /filter's decisions tell the user, told of the placer's: the card score lines,
        # and the Events of a pod no card takes (kube-scheduler says nothing of a gated pod).
        self.report = report
        self.retry_seconds = retry_seconds
        self.most_seconds = most_seconds
        # key -> (when to try next, on the loop's clock; how long to wait after a miss): a pod
        # no card can take is tried again ever less often, and at once on its next event.
        self._due: OrderedDict[Key, tuple[float, float]] = OrderedDict()
        self._wake = asyncio.Event()

    def _ours(self, pod: Mapping[str, Any]) -> bool:
        return (pod.get("spec") or {}).get("schedulerName") == self.scheduler_name

    def seen(self, pod: Mapping[str, Any]) -> None:
        if self._ours(pod) and (gated(pod) or stranded(pod)):
            self._due[_key(pod)] = (0.0, self.retry_seconds)
            self._wake.set()
        else:
            self._due.pop(_key(pod), None)

    def gone(self, pod: Mapping[str, Any]) -> None:
        self._due.pop(_key(pod), None)
        if REQUESTS in ((pod.get("metadata") or {}).get("annotations") or {}) and self._due:
            # A DRA pod that goes frees its cards once its claims go with it: the pods waiting
            # for room are tried again from the shortest wait, not after their longest.
            self._due = OrderedDict.fromkeys(self._due, (0.0, self.retry_seconds))
            self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            waiter = asyncio.ensure_future(self._wake.wait())
            stopper = asyncio.ensure_future(stop.wait())
            # Pods left unplaced (no room yet, a write that failed) are tried again.
            await asyncio.wait(
                {waiter, stopper}, timeout=self.retry_seconds, return_when=asyncio.FIRST_COMPLETED
            )
            waiter.cancel()
            stopper.cancel()
            self._wake.clear()
            if not self.leading():
                continue
            clock = asyncio.get_running_loop().time
            for key, (at, wait) in list(self._due.items()):
                if stop.is_set() or not self.leading():
                    break
                if at > clock():
                    continue
                try:
                    done = await self.place(*key)
                except KubeError as e:
                    log.info("DRA placement not written", extra={"pod": key[:2], "error": str(e)})
                    done = False
                if done:
                    self._due.pop(key, None)
                elif self._due.get(key) == (at, wait):  # no event came meanwhile
                    self._due[key] = (clock() + wait, min(2 * wait, self.most_seconds))

    async def place(self, namespace: str, name: str, uid: str) -> bool:
        """Place one gated pod; True when nothing is left to do for it."""
        pod = await self.kube.get_pod(namespace, name)
        if pod is None or (pod.get("metadata") or {}).get("uid") != uid or not self._ours(pod):
            return True
        if stranded(pod):
            if not await self._unpin(pod):
                return True  # allocated meanwhile: nothing to place again
            # kube-scheduler's refusal stays in the pod's condition until it writes another:
            # read again once the new claim exists, it would have that claim deleted while
            # kube-scheduler may be allocating it. (Written once the old claim is gone, so
            # the pod cannot have been bound meanwhile.)
            await self.kube.patch_pod_status(namespace, name, {"conditions": [REPINNING]})
        elif not gated(pod):
            return True
        try:
            written = restore(pod)
        except TranslateError as e:
            log.warning("DRA pod not placed", extra={"pod": (namespace, name), "error": str(e)})
            return True
        outcome = decide(self.placement, written, list(self.nodes()), self.dra)
        self.report(outcome)
        decision = outcome.decision
        if outcome.error or decision is None or decision.devices is None:
            return False  # no room now: tried again when the loop comes round
        resources, families = self.placement.resources, self.placement.cache.families
        units = self.placement.cache.dra.compute_units(str(decision.node))
        try:
            claims = pinned_claims(pod, decision.devices, self.dra, resources, families, units)
        except UnpublishedCardError as e:
            # Its driver republished meanwhile: placed again, on the view as it is then.
            log.info("DRA pod not placed yet", extra={"pod": (namespace, name), "error": str(e)})
            return False
        except (TranslateError, RequestError, SelectorError) as e:
            log.warning("DRA pod not placed", extra={"pod": (namespace, name), "error": str(e)})
            return True
        for claim in claims:
            try:
                await self.kube.create_resource_claim(namespace, claim)
            except Conflict:
                # Made by an earlier leader or attempt (kept: kube-scheduler judges it), or
                # left by an earlier pod of the name until the garbage collector takes it.
                if not await self._owned(namespace, claim["metadata"]["name"], uid):
                    return False
        # The pod's gates as stored (the restored pod has ours taken out).
        held = (pod.get("spec") or {}).get("schedulingGates") or []
        gates = [g for g in held if g.get("name") != GATE]
        if len(gates) != len(held):
            await self.kube.ungate_pod(namespace, name, uid, gates)
        return True

    async def _unpin(self, pod: Mapping[str, Any]) -> bool:
        """Delete the stranded pod's claims that are still unallocated, each as read (a claim
        allocated meanwhile stays); True when one went or is missing (deleted earlier while no
        card had room), so the pod is placed again."""
        meta = pod.get("metadata") or {}
        namespace, uid = str(meta.get("namespace")), str(meta.get("uid"))
        try:
            ours = {entry_name(c) for c in recorded(pod) or ()}
        except TranslateError:
            ours = set()  # place() says why the pod cannot be placed
        went = False
        for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
            claim = await self.kube.get_resource_claim(
                namespace, str(entry.get("resourceClaimName"))
            )
            if claim is None:
                went = went or entry.get("name") in ours
                continue
            if (claim.get("status") or {}).get("allocation"):
                continue
            cmeta = claim["metadata"]
            if not any(o.get("uid") == uid for o in cmeta.get("ownerReferences") or ()):
                continue
            try:
                await self.kube.delete_resource_claim(
                    namespace, cmeta["name"], cmeta["uid"], cmeta["resourceVersion"]
                )
            except (Conflict, NotFound):
                continue
            went = True
        return went

    async def _owned(self, namespace: str, name: str, uid: str) -> bool:
        claim = await self.kube.get_resource_claim(namespace, name)
        owners = ((claim or {}).get("metadata") or {}).get("ownerReferences") or ()
        return any(o.get("uid") == uid for o in owners)
