"""The bind use case: take the node lock, post the Binding that carries the allocation.

The allocation annotations travel inside the Binding: kube-apiserver sets spec.nodeName and
merges them in one update, and only while the pod is unbound, so a pod is bound with exactly
the cards of the node it is bound to, or not at all. A late or repeated bind cannot overwrite
the allocation of a pod another bind placed (its Binding is refused), and a failed bind leaves
nothing on the pod to undo. HAMi's node lock is taken first (its device plugin finds the pod
being allocated through it and releases it after Allocate); it is the only thing a failed bind
may have to give back.

Every bind answers within its Budget, before kube-scheduler's extender timeout sends the pod
elsewhere; one bind per pod runs at a time; a bind writes nothing once the leadership term it
started in has ended; and after any failed call the pod is read back (hami.service.bindrules)
before deciding what happened.
"""

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from hami.cache.store import ClusterCache
from hami.engine import names
from hami.engine.codec import encode_pod_devices
from hami.engine.model import PodDevices
from hami.kube.api import KubeAPI
from hami.kube.errors import KubeError
from hami.kube.events import EventReason, EventRecorder
from hami.kube.leader import Leadership, NotLeading
from hami.service.advertised import node_shortfall
from hami.service.annotations import allocation_annotations, allocation_labels
from hami.service.binderrors import (
    BindError,
    BindFailure,
    as_bind_error,
    bound_elsewhere,
    describe,
)
from hami.service.bindpost import Job, Plan, post_binding, read
from hami.service.bindrules import Budget, Found, read_back
from hami.service.deadline import Deadline
from hami.service.nodelock.locker import NodeLocker
from hami.service.nodelock.table import NodeLocks
from hami.service.nodelock.wire import LockSpec, family_locks
from hami.service.outcomes import Ended, Outcomes, Unknown

log = logging.getLogger(__name__)

# Called after the node lock and before the Binding, e.g. to fill the per-pod object that
# carries limits (fail closed: an error aborts the bind).
BeforeBinding = Callable[[str, str, str, PodDevices], Awaitable[None]]


class Binder:
    def __init__(
        self,
        kube: KubeAPI,
        cache: ClusterCache,
        events: EventRecorder,
        *,
        now: Callable[[], datetime],
        locks: NodeLocks,
        leadership: Leadership,
        budget: Budget,
        lock_expiry: timedelta = timedelta(minutes=5),
        lock_wait: float = 20.0,
        before_binding: BeforeBinding | None = None,
        on_failure: Callable[[str], None] | None = None,
        on_unknown: Callable[[Ended], None] | None = None,
        success_events: bool = False,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.events = events
        self.now = now
        self.locks = locks
        self.leadership = leadership
        self.budget = budget
        self.lock_expiry = lock_expiry
        self.lock_wait = lock_wait
        self.before_binding = before_binding
        self.on_failure = on_failure
        self.success_events = success_events
        self.locker = NodeLocker(
            kube,
            locks,
            now=now,
            expiry=lock_expiry,
            write_timeout=budget.write,
            binding=self.binding,
        )
        # Binds whose Binding may have landed, their pods read back until it is known.
        self.outcomes = Outcomes(
            kube, cache, self.locker, read_timeout=budget.write, observe=on_unknown
        )
        # The one bind under way per pod (namespace, name), and its node.
        self._flights: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._targets: dict[tuple[str, str], str] = {}
        # uid -> node of binds that succeeded lately: a retry whose first attempt succeeded
        # must not take the node lock again, or the lock would outlive the device plugin's
        # Allocate and block the node.
        self._recent: OrderedDict[str, str] = OrderedDict()

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Bind or raise BindError, within the budget from the moment the request came in.

        The bind runs shielded, so a disconnecting caller cannot cut it in half, and its answer
        may come before it has finished (a failed bind gives the node lock back afterwards).
        A second bind of the same pod waits until the first has finished.
        """
        deadline = Deadline(self.budget.total)
        key = (namespace, name)
        while (earlier := self._flights.get(key)) is not None:
            try:
                async with deadline.step():
                    await asyncio.wait({earlier})
            except TimeoutError:
                raise BindError(
                    f"bind {namespace}/{name} to {node}: an earlier bind of this pod is still "
                    "under way; kube-scheduler will retry",
                    BindFailure.DEADLINE,
                ) from None
        # kube-scheduler's retry of a bind whose outcome is unknown reads the pod itself.
        self.outcomes.supersede(namespace, name, node)
        term = self.leadership.current()
        if term is None:
            raise BindError(
                "this replica is not the leader; only the leader serves filter and bind",
                BindFailure.NOT_LEADER,
            )
        answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        job = Job(namespace, name, uid, node, term, deadline, answer)
        task = asyncio.ensure_future(self._run(job))
        self._flights[key] = task
        self._targets[key] = node
        task.add_done_callback(lambda done: self._landed(key, done))
        await asyncio.shield(answer)

    def _landed(self, key: tuple[str, str], done: "asyncio.Task[None]") -> None:
        if self._flights.get(key) is done:
            del self._flights[key]
            del self._targets[key]

    def binding(self, namespace: str, name: str, node: str) -> bool:
        """Whether a bind of that pod to that node is under way here."""
        return self._targets.get((namespace, name)) == node

    async def drain(self, within: float) -> int:
        """Wait for binds under way (graceful shutdown); returns how many did not finish."""
        pending = set(self._flights.values())
        if pending:
            _, pending = await asyncio.wait(pending, timeout=within)
        return len(pending)

    async def _run(self, job: Job) -> None:
        try:
            await self._bind(job)
        except Exception as e:
            log.exception("bind failed unexpectedly", extra=job.context)
            # Where it failed is not known: a Binding it sent may have landed.
            self._ended_unknown(job)
            job.fail(BindError(f"bind {job} to {job.node} failed: {describe(e)}"))
        finally:
            # Cancelled (shutdown): the caller is answered all the same.
            job.fail(BindError(f"bind {job} to {job.node} cut short"))

    async def _bind(self, job: Job) -> None:
        ref = {"namespace": job.namespace, "name": job.name, "uid": job.uid}
        try:
            plan = await self._plan(job)
            if plan is None:
                log.info("pod already bound to this node", extra=job.context)
                job.answer.set_result(None)
                return
            answered = await self._bind_plan(job, plan)
        except BindError as e:
            job.fail(e)
            if e.reason is BindFailure.UNKNOWN_OUTCOME:
                self._ended_unknown(job)
            else:
                self.cache.binds.failed(job.uid)
            log.warning("bind failed", extra={**job.context, "error": str(e), "reason": e.reason})
            self.events.record(ref, "Warning", EventReason.BINDING_FAILED, str(e))
            if self.on_failure is not None:
                self.on_failure(e.reason)
            if e.release_lock:
                # After the answer: kube-scheduler's clock does not wait for the clean-up. The
                # locks are ours whatever the term: left behind they would block the node.
                for lock, value in job.locks.items():
                    await self.locker.give_back(job.node, job.namespace, job.name, lock, value)
            return
        self.cache.binds.landed(job.uid)
        job.answer.set_result(None)
        if job.uid:
            self._recent[job.uid] = job.node
            if len(self._recent) > 10_000:
                self._recent.popitem(last=False)
        extra = {**job.context, "allocated": encode_pod_devices(plan.devices)}
        if not answered:
            log.warning("pod bound, though the Binding's answer was lost", extra=extra)
        else:
            log.info("pod bound", extra=extra)
        if self.success_events:
            self.events.record(
                ref,
                "Normal",
                EventReason.BINDING_SUCCEED,
                f"Successfully binding node [{job.node}] to {job}",
            )
        short = node_shortfall(self.cache, job.node)
        if short is not None:
            log.warning("node advertises too few GPUs", extra={**job.context, "why": short})
            self.events.record(ref, "Warning", EventReason.NODE_ADVERTISES_TOO_FEW_GPUS, short)

    def _ended_unknown(self, job: Job) -> None:
        """A bind ended without knowing whether a Binding it sent landed: the cards stay
        counted while the pod is read back (hami.service.outcomes). One that sent none has
        simply failed."""
        if not job.sent:
            self.cache.binds.failed(job.uid)
            return
        rv, at = job.sent[-1]
        self.cache.binds.unknown(job.uid, rv)
        unknown = Unknown(job.namespace, job.name, job.uid, job.node, rv, at, dict(job.locks))
        self.outcomes.follow(unknown)

    async def _plan(self, job: Job) -> Plan | None:
        """What to bind, or None when the pod is already bound to the node (a retried bind)."""
        where = self._recent.get(job.uid) if job.uid else None
        held = self.cache.allocation(job.uid) if job.uid else None
        if held is not None and held.bound:
            where = held.node
        if where == job.node:
            return None
        if where is not None:
            raise bound_elsewhere(job.namespace, job.name, job.node, where)
        res = self.cache.reservation(job.uid)
        if res is not None and res.node == job.node:
            self._check_still_fits(job, res.devices)
            self.cache.binds.started(job.uid)
            return Plan(res.devices, res.n_init, res.containers, res.resource_version)
        pod = await read(self.kube, job)
        state = read_back(pod, job.uid, job.node)
        if state.found is Found.BOUND_HERE:
            return None
        if state.found is Found.BOUND_ELSEWHERE:
            raise bound_elsewhere(job.namespace, job.name, job.node, state.node)
        if state.found is not Found.UNBOUND or pod is None:
            self.cache.forget(job.uid)
            raise BindError(f"pod {job} not found or being deleted", BindFailure.POD_GONE)
        if self.cache.asks_for_no_gpu(pod):
            # Claimed by the webhook (say `nvidia.com/gpu: 0` beside a gpumem), passed by filter:
            # HAMi binds it with no lock and no allocation, so does this; the device plugin is
            # never asked for it.
            return Plan((), 0, resource_version=state.resource_version)
        chose = f"node {res.node}" if res is not None else "no node"
        raise BindError(
            f"pod {job} has no placement on node {job.node} (filter chose {chose}); "
            "the decision expired or came from another scheduler replica, kube-scheduler will retry",
            BindFailure.NO_PLACEMENT,
        )

    def _check_still_fits(self, job: Job, devices: PodDevices) -> None:
        """Refuse a plan that an allocation arrived since filter now overlaps (a previous
        leader's last bind landing after the hand-over): it would over-commit the card."""
        over = self.cache.overcommitted(job.node, devices)
        if over:
            self.cache.forget(job.uid)
            raise BindError(
                f"pod {job}: card {', '.join(over)} of node {job.node} has no room for it any "
                "more: what the card holds changed since filter (an allocation, a pod bound "
                "outside the scheduler, or the node's registration); kube-scheduler will retry",
                BindFailure.CARD_TAKEN,
            )

    async def _bind_plan(self, job: Job, plan: Plan) -> bool:
        """Lock, then Binding; whether the Binding was answered (False: its answer was lost,
        and the pod read back is bound here)."""
        # The node lock only tells HAMi's device plugin which pod to allocate; a node registered
        # from GFD labels has none, so nobody would release it and nothing waits for Allocate.
        # Taken whenever any container gets a device, init containers included (HAMi looks at
        # the app containers only): the plugin's Allocate for a pod whose only GPU is an init
        # container's would otherwise find the next pod bound to the node through the lock.
        handshake = self.cache.handshake(job.node, plan.devices)
        needs_lock = handshake and any(plan.devices)
        # A family's own lock first (HAMi's lockAllDevices goes by vendor name: the one such
        # family sorts before NVIDIA); each is waited for, where HAMi's bind fails at once.
        own = family_locks(plan.devices[plan.n_init :], self.cache.families)
        locks: tuple[LockSpec | None, ...] = (*own, *((None,) if needs_lock else ()))
        # The Binding and the read-back after it keep their share of the budget.
        keep = self.budget.binding + self.budget.verify
        try:
            wait = Deadline(max(0.0, min(job.deadline.left(keep), self.lock_wait)))
            for lock in locks:
                job.locks[lock] = None
                job.locks[lock] = await self.locker.take(
                    job.node, job.namespace, job.name, job.term, wait, lock
                )
            if self.before_binding is not None and plan.devices:
                job.term.check()
                async with job.deadline.step(keep):
                    await self.before_binding(job.namespace, job.name, job.uid, plan.devices)
            phase = names.PHASE_ALLOCATING if handshake else names.PHASE_SUCCESS
            return await self._post_binding(job, plan, phase)
        except (KubeError, NotLeading, TimeoutError, BindError) as e:
            failure = (
                e
                if isinstance(e, BindError)
                else as_bind_error(e, job.namespace, job.name, job.node)
            )
            # A lock write of ours may have landed. It is left to the device plugin when the pod
            # may be bound here after all (the outcome is unknown), until its read-back says.
            failure.release_lock = bool(locks) and failure.reason != BindFailure.UNKNOWN_OUTCOME
            raise failure from e

    async def _post_binding(self, job: Job, plan: Plan, phase: str) -> bool:
        # A pod that asks for no card (plan.devices empty) gets the Binding alone, as in HAMi.
        now = self.now()
        unix = int(now.timestamp())
        annotations = (
            allocation_annotations(
                job.node,
                plan.devices,
                unix,
                phase,
                families=self.cache.families,
                containers=plan.containers,
                cards=self.cache.family_cards(job.node),
                now_ns=int(now.timestamp() * 1_000_000_000),
            )
            if plan.devices
            else {}
        )
        labels = allocation_labels(job.node) if plan.devices else {}
        return await post_binding(
            self.kube, job, self.budget, annotations, labels, plan.resource_version
        )
