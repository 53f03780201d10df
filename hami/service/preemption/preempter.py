"""Carrying out a GPU preemption: evict, nominate, hold the freed cards, place the pod.

A GPU pod the filter turns away is planned for in the background
(hami.service.preemption.plan). A plan's victims are evicted through the Eviction
API, so PodDisruptionBudgets are honoured: a refused eviction (429) ends the
plan, and the preemptor's Event and its next filter answer say why. Victims the
budgets protect are tried first, so a refusal comes before any other victim is
lost. The cards the plan frees are held for the preemptor in the cache (a
reservation that expires) from the moment of the plan, so no other pod takes
them while the victims terminate; the preemptor's own filter lifts the hold,
fits once the victims are gone, and is held again while they are not. Every
victim then carries kube-scheduler's DisruptionTarget reason
PreemptionByScheduler, as its own preemption writes it, so kube-scheduler keeps
the preemptor's status.nominatedNodeName instead of clearing it while they go.
"""

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hami.cache.store import ClusterCache
from hami.engine.model import PodDevices, PodRequest
from hami.engine.pdb import Budget, parse_budget
from hami.engine.policy import Defaults, PodOptions
from hami.engine.preempt import Preemption, Preemptor, Victim
from hami.engine.requests import ResourceDefaults
from hami.kube.api import KubeAPI
from hami.kube.errors import KubeError, NotFound
from hami.kube.events import EventReason, EventRecorder
from hami.service.placement import FilterOutcome, Placement, PodRef
from hami.service.preemption.facts import PodFacts, preemptor_of
from hami.service.preemption.plan import at_once, field, paced

log = logging.getLogger(__name__)

# (outcome, reason): outcome is attempted, done or refused; reason says why a plan was refused.
Observe = Callable[[str, str], None]
RETRY_SECONDS = 10.0  # a refused or failed plan is not tried again for this long


@dataclass(frozen=True, slots=True)
class Hold:
    node: str
    devices: PodDevices
    n_init: int
    expires: float  # monotonic
    victims: frozenset[str]


class Preempter:
    def __init__(
        self,
        kube: KubeAPI,
        cache: ClusterCache,
        facts: PodFacts,
        events: EventRecorder,
        *,
        scheduler_name: str,
        hold_seconds: float,
        observe: Observe = lambda outcome, reason: None,
        nudge: Callable[[str], None] = lambda node: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.facts = facts
        self.events = events
        self.scheduler_name = scheduler_name
        self.hold_seconds = hold_seconds
        self.observe = observe
        # Asks kube-scheduler to filter the pods it was refused again (hami.service.requeue), so
        # a refusal reaches the pod's PodScheduled condition without waiting for its next retry.
        self.nudge = nudge
        self.clock = clock
        self._holds: dict[str, Hold] = {}
        self._busy: set[str] = set()  # preemptors whose plan is being made
        self._deleted: set[str] = set()  # of those, the ones deleted meanwhile
        self._refused: dict[str, tuple[float, str, str]] = {}  # uid -> (until, node, why)
        self._tasks: set[asyncio.Task[None]] = set()

    # --- the filter's side ----------------------------------------------------------------

    def placed(self, uid: str) -> None:
        self._holds.pop(uid, None)  # a hold, if any, has done its job
        self._refused.pop(uid, None)

    def after_filter(
        self,
        pod: Mapping[str, Any],
        outcome: FilterOutcome,
        asked: tuple[PodRequest, PodOptions],
        candidates: Sequence[str],
    ) -> FilterOutcome:
        """A GPU pod turned away: keep its hold, say why it waits, or plan a preemption."""
        uid = outcome.pod.uid
        now = self.clock()
        hold = self._holds.get(uid)
        if hold is not None and hold.expires > now:
            # Its own filter lifted the hold to see whether the victims are gone; they are not.
            ref = outcome.pod
            self.cache.reserve(
                uid,
                ref.namespace,
                ref.name,
                hold.node,
                hold.devices,
                hold.n_init,
                hold.expires,
                annotations=dict(asked[1].family_annotations),
            )
            why = (
                f"{outcome.failed.get(hold.node, 'no room yet')}; its cards are held for this "
                f"pod while {len(hold.victims)} preempted pod(s) terminate"
            )
            return replace(outcome, failed={**outcome.failed, hold.node: why})
        if hold is not None:
            stuck = sum(self.facts.get(v) is not None for v in hold.victims)
            if stuck:
                # Victims that outlive their grace period and the hold: the cards are no longer
                # held, and no further pod is preempted until they are gone.
                why = (
                    f"{outcome.failed.get(hold.node, 'no room yet')}; {stuck} pod(s) it "
                    "preempted have not terminated and the hold on their cards has expired"
                )
                return replace(outcome, failed={**outcome.failed, hold.node: why})
        self._holds.pop(uid, None)
        refused = self._refused.get(uid)
        if refused is not None:
            until, node, why = refused
            if node in outcome.failed:
                failed = {**outcome.failed, node: f"{outcome.failed[node]}; preemption: {why}"}
                outcome = replace(outcome, failed=failed)
            if until > now:
                return outcome
        if uid not in self._busy:
            self._busy.add(uid)
            preemptor = preemptor_of(pod, *asked, self.cache.families)
            n_init = len((pod.get("spec") or {}).get("initContainers") or ())
            task = asyncio.get_running_loop().create_task(
                self._attempt(outcome.pod, preemptor, n_init, tuple(candidates))
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return outcome

    def gone(self, pod: Mapping[str, Any]) -> None:
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        self._holds.pop(uid, None)
        self._refused.pop(uid, None)
        if uid in self._busy:
            self._deleted.add(uid)  # its plan, under way, must not evict for nobody

    # --- the plan ---------------------------------------------------------------------------

    def _doomed(self) -> frozenset[str]:
        now = self.clock()
        return frozenset(v for h in self._holds.values() if h.expires > now for v in h.victims)

    async def _attempt(
        self, ref: PodRef, pod: Preemptor, n_init: int, candidates: tuple[str, ...]
    ) -> None:
        pod = replace(pod, quota=self.cache.quotas.quota(ref.namespace))
        try:
            if await self._plan(pod, ref.uid, candidates, ()) is None:
                return  # nothing helps, whatever the budgets say: no API call
            try:
                budgets = [
                    b
                    for b in map(parse_budget, await self.kube.list_pod_disruption_budgets())
                    if b is not None
                ]
            except KubeError as e:
                self._refuse(ref, "", "error", f"cannot read PodDisruptionBudgets: {e}")
                return
            best = await self._plan(pod, ref.uid, candidates, budgets)
            # The state may have moved while the loop served others: the chosen node is planned
            # again, and from here to the hold nothing awaits, so no filter or plan sees the
            # cards in between.
            if best is None:
                return
            chosen = at_once(
                field(
                    self.cache, self.facts, pod, ref.uid, [best.node], budgets, self._doomed()
                ).planning()
            )
            placed = self.cache.reservation(ref.uid) or self.cache.allocation(ref.uid)
            if chosen is None or placed is not None or ref.uid in self._deleted:
                return
            hold = self._hold(ref, chosen, n_init, pod)
        finally:
            self._busy.discard(ref.uid)
            self._deleted.discard(ref.uid)
        await self._carry_out(ref, chosen, hold)

    async def _plan(
        self, pod: Preemptor, uid: str, candidates: Sequence[str], budgets: Sequence[Budget]
    ) -> Preemption | None:
        """The plan, the victims of plans under way counted as gone, made on the event loop."""
        return await paced(
            field(self.cache, self.facts, pod, uid, candidates, budgets, self._doomed()).planning()
        )

    def _hold(self, ref: PodRef, chosen: Preemption, n_init: int, pod: Preemptor) -> Hold:
        graces = [f.grace for v in chosen.victims if (f := self.facts.get(v.uid)) is not None]
        # The victims' grace period is theirs to use; the hold outlasts it by hold_seconds.
        expires = self.clock() + max(graces, default=0.0) + self.hold_seconds
        hold = Hold(
            chosen.node, chosen.devices, n_init, expires, frozenset(v.uid for v in chosen.victims)
        )
        self._holds[ref.uid] = hold
        self._refused.pop(ref.uid, None)
        # The pod's annotations its families' rules read, those of the pods holding a card among
        # them (hami.engine.holders).
        self.cache.reserve(
            ref.uid,
            ref.namespace,
            ref.name,
            chosen.node,
            chosen.devices,
            n_init,
            expires,
            annotations=dict(pod.options.family_annotations),
        )
        return hold

    # --- the writes -------------------------------------------------------------------------

    async def _carry_out(self, ref: PodRef, chosen: Preemption, hold: Hold) -> None:
        self.observe("attempted", "")
        names = ", ".join(f"{v.namespace}/{v.name}" for v in chosen.victims)
        log.info(
            "preempting",
            extra={
                "namespace": ref.namespace,
                "pod": ref.name,
                "node": chosen.node,
                "victims": names,
            },
        )
        self.events.record(
            _obj(ref),
            "Normal",
            EventReason.PREEMPTING,
            f"Preempting {len(chosen.victims)} lower-priority GPU pod(s) on node {chosen.node}: "
            f"{names}",
        )
        # Budget-protected victims first: if one is refused, no other victim is lost for nothing.
        for victim in sorted(chosen.victims, key=lambda v: not v.violates_pdb):
            why = await self._evict(ref, victim, chosen.node)
            if why is not None:
                if self._holds.get(ref.uid) is hold:
                    del self._holds[ref.uid]
                    self.cache.forget(ref.uid)
                self._refuse(ref, chosen.node, *why)
                return
        try:
            await self.kube.patch_pod_status(
                ref.namespace, ref.name, {"nominatedNodeName": chosen.node}
            )
        except KubeError as e:
            # The hold, not the nomination, keeps the cards: the plan goes on.
            log.warning(
                "could not set nominatedNodeName",
                extra={"namespace": ref.namespace, "pod": ref.name, "error": str(e)},
            )
        self.observe("done", "")

    async def _evict(self, ref: PodRef, victim: Victim, node: str) -> tuple[str, str] | None:
        """None once the victim is on its way out, else (metric reason, why)."""
        who = f"{victim.namespace}/{victim.name}"
        try:
            await self.kube.evict_pod(victim.namespace, victim.name, victim.uid)
        except NotFound:
            return None  # gone already
        except KubeError as e:
            reason = "disruption-budget" if e.status == 429 else "error"
            return reason, f"eviction of {who} refused: {e}"
        self.events.record(
            _obj_of(victim),
            "Normal",
            EventReason.PREEMPTED,
            f"Preempted by pod {ref.uid} on node {node}",
        )
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": f"{self.scheduler_name}: preempting to accommodate a higher priority pod",
        }
        try:
            await self.kube.patch_pod_status(
                victim.namespace, victim.name, {"conditions": [condition]}
            )
        except KubeError as e:
            log.info("could not mark a victim", extra={"pod": who, "error": str(e)})
        return None

    def _refuse(self, ref: PodRef, node: str, reason: str, why: str) -> None:
        self.observe("refused", reason)
        self._refused[ref.uid] = (self.clock() + RETRY_SECONDS, node, why)
        self.nudge(node)
        log.warning(
            "preemption refused",
            extra={"namespace": ref.namespace, "pod": ref.name, "node": node, "reason": why},
        )
        self.events.record(
            _obj(ref),
            "Warning",
            EventReason.FAILED_PREEMPTION,
            f"Preemption on node {node or '-'} abandoned: {why}; the pod stays pending and "
            f"preemption is tried again in {RETRY_SECONDS:g}s",
        )

    async def drain(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _obj(ref: PodRef) -> dict[str, str]:
    return {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid}


def _obj_of(v: Victim) -> dict[str, str]:
    return {"namespace": v.namespace, "name": v.name, "uid": v.uid}


class PreemptingPlacement(Placement):
    """Placement whose turned-away GPU pods may preempt (hami serve --preemption)."""

    def __init__(
        self,
        preempter: Preempter,
        cache: ClusterCache,
        policies: Defaults,
        resources: ResourceDefaults,
    ) -> None:
        super().__init__(cache, policies, resources)
        self.preempter = preempter

    def filter(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> FilterOutcome:
        outcome = super().filter(pod, node_names)
        if outcome.node_names:
            self.preempter.placed(outcome.pod.uid)
            return outcome
        asked = None if outcome.error or not outcome.gpu else self.ask(pod)
        if asked is None:
            return outcome
        return self.preempter.after_filter(pod, outcome, asked, node_names)
