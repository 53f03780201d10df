"""One bind's job, and the Binding it posts: sent again while the pod reads unbound, and read
back after every failed call, since the answer to a failed call is not the truth.

Every Binding carries the pod's resourceVersion as a precondition (the one filter saw, then
the one each read-back found): once the pod reads unbound at a later version, no Binding this
bind sent can land any more. That is what lets an unknown outcome end without waiting for a
watch event (hami.service.outcomes).
"""

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hami.engine.model import PodDevices
from hami.kube.api import KubeAPI
from hami.kube.errors import Conflict, KubeError, NotFound, Unavailable
from hami.kube.leader import Term
from hami.service.binderrors import BindError, BindFailure, describe, from_state
from hami.service.bindrules import Budget, Found, read_back
from hami.service.deadline import Deadline
from hami.service.nodelock.wire import LockSpec

log = logging.getLogger(__name__)

# How many times an unanswered or throttled Binding is sent again while the pod is unbound.
BINDING_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class Plan:
    devices: PodDevices
    n_init: int
    containers: tuple[Mapping[str, Any], ...] = ()  # for other families' binds (BindContext)
    resource_version: str = ""  # the pod's, as filter (or the bind's read) saw it


@dataclass(frozen=True, slots=True)
class Job:
    """One bind: the pod, the node kube-scheduler asked for, the term and time it runs in, and
    where its answer goes (it may be given before the job has finished cleaning up)."""

    namespace: str
    name: str
    uid: str
    node: str
    term: Term
    deadline: Deadline
    answer: "asyncio.Future[None]"
    # The locks this bind tried (None: HAMi's), with the value it took (None: not taken).
    locks: dict[LockSpec | None, str | None] = field(default_factory=dict)
    # (resourceVersion, when on the loop's clock) of each Binding that may have gone out.
    sent: list[tuple[str, float]] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def context(self) -> dict[str, str]:
        return {"namespace": self.namespace, "pod": self.name, "node": self.node}

    def fail(self, error: BindError) -> None:
        if not self.answer.done():
            self.answer.set_exception(error)
            self.answer.exception()  # whoever asked may have gone: nothing is left unretrieved


async def read(kube: KubeAPI, job: Job) -> dict[str, object] | None:
    """The pod as the API server holds it now; BindError when it cannot be read in time."""
    try:
        async with job.deadline.step():
            return await kube.get_pod(job.namespace, job.name)
    except (KubeError, TimeoutError) as e:
        raise BindError(
            f"bind {job}: cannot tell whether the pod was bound: reading it back "
            f"failed ({describe(e)}); kube-scheduler will retry",
            BindFailure.UNKNOWN_OUTCOME,
        ) from e


async def post_binding(
    kube: KubeAPI,
    job: Job,
    budget: Budget,
    annotations: Mapping[str, str],
    labels: Mapping[str, str],
    resource_version: str,
) -> bool:
    """Post the Binding until it lands or the pod reads other than unbound; whether its
    answer came (False: it was lost, and the pod read back is bound here)."""
    loop = asyncio.get_running_loop()
    rv = resource_version
    for attempt in range(1, BINDING_ATTEMPTS + 1):
        job.term.check()
        left = job.deadline.left(budget.verify)
        if left <= 0:
            raise TimeoutError
        try:
            job.sent.append((rv, loop.time()))
            await kube.bind_pod(
                job.namespace,
                job.name,
                job.uid,
                job.node,
                annotations,
                labels,
                min(left, budget.write),
                fence=job.term.check,
                resource_version=rv,
            )
            return True
        except NotFound:
            raise BindError(f"pod {job} not found", BindFailure.POD_GONE) from None
        except (Conflict, Unavailable) as e:
            error: KubeError = e
        state = read_back(await read(kube, job), job.uid, job.node)
        if state.found is Found.BOUND_HERE:
            return False
        if state.found is not Found.UNBOUND or attempt == BINDING_ATTEMPTS:
            raise from_state(state, job.namespace, job.name, job.node, error, rv)
        # A Conflict may say only that the pod changed since filter saw it: the next attempt
        # is sent for the version just read.
        rv = state.resource_version or rv
        pause = min(0.1 * 2**attempt, job.deadline.left(budget.verify))
        if isinstance(error, Unavailable) and error.retry_after:
            pause = max(pause, min(error.retry_after, job.deadline.left(budget.verify)))
        log.info("Binding not done, sending it again", extra={**job.context, "error": str(error)})
        await asyncio.sleep(max(0.0, pause))
    raise AssertionError("unreachable: the last attempt returns or raises")
