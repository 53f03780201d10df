"""Asking kube-scheduler to try again the GPU pods we turned away, once capacity frees up.

kube-scheduler retries an unschedulable pod when a cluster event might help
it, and a pod rejected by an extender is retried on any event. But its watch
and ours race: a deleted pod's event reaches kube-scheduler first, it asks
/filter again 2-7 ms later, before our cache has seen the delete, we answer
with the old usage, and nothing retries the pod until kube-scheduler's
five-minute flush. So when our cache frees capacity, the pods we last turned
away are touched (one annotation, `hami.io/requeue`): an update of the pod
itself, which puts it back in kube-scheduler's queue now that our cache
agrees. Bounded: each pod at most once a second, all pods together at most
`rate` a second, and only pods we rejected since their last touch.

Logged, so that a refusal followed by a placement reads as a story: each pass says how many
pods it asked about and on which nodes capacity freed up, and a touched pod that is then placed
says so, with how long it waited.
"""

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from hami.kube.api import KubeAPI
from hami.kube.errors import KubeError
from hami.service.placement import FilterOutcome, PodRef

log = logging.getLogger(__name__)

REQUEUE_ANNOTATION = "hami.io/requeue"
MAX_FREED_NAMED = 20  # nodes named in one pass's log line; a mass release names the first


class Requeuer:
    def __init__(
        self,
        kube: KubeAPI,
        *,
        clock: Callable[[], float],
        rate: float = 100.0,
        per_pod_interval: float = 1.0,
        limit: int = 10_000,
    ) -> None:
        self.kube = kube
        self.clock = clock
        self.rate = rate
        self.per_pod_interval = per_pod_interval
        self.limit = limit
        self._rejected: OrderedDict[str, PodRef] = OrderedDict()  # uid -> pod, oldest first
        self._touched: dict[str, float] = {}  # uid -> when we last touched it
        self._since: dict[str, float] = {}  # uid -> when we first turned it away
        self._freed: set[str] = set()  # nodes that released capacity since the last pass
        self._why: dict[str, list[str]] = {}  # uid -> the freed nodes its last touch was for
        self._due = asyncio.Event()
        self.touches = 0

    # --- what the filter, the watch and the cache tell it -------------------------------------

    def filtered(self, outcome: FilterOutcome) -> None:
        if not outcome.gpu or outcome.error:
            return
        uid = outcome.pod.uid
        if outcome.node_names:
            if uid in self._why:
                log.info(
                    "pod placed after a requeue",
                    extra={
                        "namespace": outcome.pod.namespace,
                        "pod": outcome.pod.name,
                        "node": outcome.node_names[0],
                        "waited_seconds": round(self.clock() - self._since[uid], 3),
                        "freed_on": self._why[uid],
                    },
                )
            self.forget(uid)
            return
        self._rejected.pop(uid, None)
        self._rejected[uid] = outcome.pod
        self._since.setdefault(uid, self.clock())
        while len(self._rejected) > self.limit:
            # The oldest rejections wait for kube-scheduler's own periodic retry.
            old, _ = self._rejected.popitem(last=False)
            self.forget(old)

    def seen(self, pod: Mapping[str, Any]) -> None:
        """A pod event from the watch: a pod that is placed or finished needs no retry."""
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        if spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            self.forget(str((pod.get("metadata") or {}).get("uid", "")))

    def forget(self, uid: str) -> None:
        self._rejected.pop(uid, None)
        self._touched.pop(uid, None)
        self._since.pop(uid, None)
        self._why.pop(uid, None)

    def waiting(self) -> tuple[int, float]:
        """GPU pods turned away for want of a card and not placed since (at most `limit`), and
        the seconds since the longest-waiting of them was first turned away (0 when none)."""
        if not self._since:
            return 0, 0.0
        return len(self._since), self.clock() - min(self._since.values())

    def gone(self, pod: Mapping[str, Any]) -> None:
        self.forget(str((pod.get("metadata") or {}).get("uid", "")))

    def released(self, node: str) -> None:
        if self._rejected:
            if len(self._freed) < MAX_FREED_NAMED:
                self._freed.add(node)
            self._due.set()

    # --- the worker -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            waiter = asyncio.ensure_future(self._due.wait())
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            stopper.cancel()
            if stop.is_set():
                return
            # Releases come in bursts (a Job's pods finishing): one pass serves them all.
            await asyncio.sleep(0.02)
            self._due.clear()
            await self._touch_all(stop)

    async def _touch_all(self, stop: asyncio.Event) -> None:
        now = self.clock()
        freed, self._freed = sorted(self._freed), set()
        due = [
            ref
            for uid, ref in self._rejected.items()
            if now - self._touched.get(uid, -self.per_pod_interval) >= self.per_pod_interval
        ]
        asked = 0
        for ref in due:
            if stop.is_set():
                break
            if ref.uid not in self._rejected:
                continue  # placed meanwhile
            self._touched[ref.uid] = self.clock()
            if await self._touch(ref):
                asked += 1
                self._why[ref.uid] = freed
            await asyncio.sleep(1 / self.rate)
        if asked:
            log.info(
                "asked kube-scheduler to retry refused GPU pods: capacity freed up",
                extra={"pods": asked, "freed_on": freed},
            )
        if not stop.is_set() and any(uid not in self._touched for uid in self._rejected):
            self._due.set()  # rejected while this pass ran: their turn next

    async def _touch(self, ref: PodRef) -> bool:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        ctx = {"namespace": ref.namespace, "pod": ref.name}
        try:
            await self.kube.patch_pod_metadata(
                ref.namespace, ref.name, {REQUEUE_ANNOTATION: stamp}, {}
            )
        except KubeError as e:
            # Gone, or the API server is busy: kube-scheduler's own retry remains.
            log.info("could not ask kube-scheduler to retry", extra={**ctx, "error": str(e)})
            return False
        self.touches += 1
        log.debug("asked kube-scheduler to retry", extra=ctx)
        return True
