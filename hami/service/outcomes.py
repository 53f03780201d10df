"""Binds whose outcome is unknown, read back until the pod tells.

A Binding whose answer was lost, and whose pod could not be read back within the bind's budget
(an API server restarting, or overloaded), may or may not have landed. Its cards stay counted
meanwhile (the cache's UNKNOWN stage), which is safe; deciding either way without reading the
pod is not. So each such bind is followed here, in the background, by reading its pod back with
a backoff until a read succeeds and says:

* bound to the node: the Binding landed; the pods watch confirms it as it does any bind;
* bound elsewhere, gone or being deleted: the reservation and the locks the bind wrote go back;
* unbound at a resourceVersion later than the one the Binding was sent for: the Binding carries
  that version as a precondition, so it can never land; the same;
* unbound at that very version: the Binding may still be inside the API server, until kube-
  apiserver's request timeout (60 s unless its --request-timeout says otherwise) has passed
  since it was sent; after that it cannot land either.

The pods watch ends the reservation sooner when it shows the pod unbound at a later version
(hami.cache.store). Nothing here waits on the watch, so one pod's lost answer never holds up
another pod: the lag that blinds the cache is measured on Bindings known to have landed only.
A new bind of the same pod to the same node takes over (kube-scheduler's retry): it reads the
pod back itself and owns the node lock from then on.
"""

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from hami.cache.store import ClusterCache
from hami.engine.versions import later
from hami.kube.api import KubeAPI
from hami.kube.errors import KubeError
from hami.service.bindrules import Found, read_back
from hami.service.nodelock.locker import NodeLocker
from hami.service.nodelock.wire import LockSpec

log = logging.getLogger(__name__)

# kube-apiserver's default --request-timeout, and a margin for etcd's answer: past this since it
# was sent, a Binding that has not landed never will.
SETTLE = 65.0
BACKOFF_FIRST = 0.5
BACKOFF_CAP = 5.0


class Ended(StrEnum):
    """How an unknown outcome ended: the `ended` label of hami_bind_unknown_outcomes_total."""

    LANDED = "landed"  # read back bound to the node
    OUTLIVED = "outlived"  # unbound at a later resourceVersion: the Binding can never land
    SETTLED = "settled"  # unbound at the Binding's version after the API server's timeout
    BOUND_ELSEWHERE = "bound-elsewhere"
    GONE = "gone"  # deleted, being deleted, or a new pod under the name
    SUPERSEDED = "superseded"  # kube-scheduler's retry bound the pod to the node again


@dataclass(frozen=True, slots=True)
class Unknown:
    """A Binding that may have landed, and what its bind holds."""

    namespace: str
    name: str
    uid: str
    node: str
    resource_version: str  # the Binding's precondition ("": none, only the timeout can tell)
    sent_at: float  # when the last Binding went out (the event loop's clock)
    locks: Mapping[LockSpec | None, str | None]  # the node locks the bind wrote, with values

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Outcomes:
    def __init__(
        self,
        kube: KubeAPI,
        cache: ClusterCache,
        locker: NodeLocker,
        *,
        read_timeout: float,
        observe: Callable[[Ended], None] | None = None,
        settle: float = SETTLE,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.locker = locker
        self.read_timeout = read_timeout
        self.observe = observe
        self.settle = settle
        self._following: dict[tuple[str, str, str], asyncio.Task[None]] = {}

    def follow(self, unknown: Unknown) -> None:
        """Read the pod back until the outcome is known, and act on it."""
        key = (unknown.namespace, unknown.name, unknown.node)
        self._stop(key)
        task = asyncio.ensure_future(self._follow(unknown))
        self._following[key] = task
        task.add_done_callback(lambda done: self._done(key, done))

    def supersede(self, namespace: str, name: str, node: str) -> None:
        """A new bind of the pod to `node` starts: it reads the pod and holds the lock itself."""
        if self._stop((namespace, name, node)):
            self._ended(Ended.SUPERSEDED)

    def following(self) -> int:
        return len(self._following)

    async def close(self) -> None:
        """Stop following (shutdown): the reservations go with the process."""
        tasks = list(self._following.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _stop(self, key: tuple[str, str, str]) -> bool:
        task = self._following.pop(key, None)
        if task is None:
            return False
        task.cancel()
        return True

    def _done(self, key: tuple[str, str, str], task: "asyncio.Task[None]") -> None:
        if self._following.get(key) is task:
            del self._following[key]

    def _ended(self, how: Ended) -> None:
        if self.observe is not None:
            self.observe(how)

    async def _follow(self, unknown: Unknown) -> None:
        pause = BACKOFF_FIRST
        while True:
            how = await self._read(unknown)
            if how is not None:
                break
            await asyncio.sleep(pause)
            pause = min(BACKOFF_CAP, pause * 2)
        landed = how is Ended.LANDED
        self.cache.binds.unknown_ended(unknown.uid, unknown.node, unknown.resource_version, landed)
        log.info(
            "bind outcome known",
            extra={
                "namespace": unknown.namespace,
                "pod": unknown.name,
                "node": unknown.node,
                "outcome": how,
            },
        )
        self._ended(how)
        if not landed:
            for lock, value in unknown.locks.items():
                await self.locker.give_back(
                    unknown.node, unknown.namespace, unknown.name, lock, value
                )

    async def _read(self, unknown: Unknown) -> Ended | None:
        """How the outcome ended as the pod reads now; None while it cannot tell yet."""
        try:
            async with asyncio.timeout(self.read_timeout):
                pod = await self.kube.get_pod(unknown.namespace, unknown.name)
        except (KubeError, TimeoutError) as e:
            log.debug("reading a pod back failed", extra={"pod": str(unknown), "error": str(e)})
            return None
        state = read_back(pod, unknown.uid, unknown.node)
        match state.found:
            case Found.BOUND_HERE:
                return Ended.LANDED
            case Found.BOUND_ELSEWHERE:
                return Ended.BOUND_ELSEWHERE
            case Found.GONE | Found.DELETING:
                return Ended.GONE
        if later(state.resource_version, unknown.resource_version):
            return Ended.OUTLIVED
        if asyncio.get_running_loop().time() - unknown.sent_at >= self.settle:
            return Ended.SETTLED
        return None
