"""The bind use case: lock the node, write the allocation, post the Binding; undo on failure.

This is where the filter's in-memory decision reaches the API server. The
node lock is HAMi's (its device plugin finds the pod being allocated through
it and releases it after Allocate), so on success the lock is left for the
device plugin; on any failure everything this bind did is undone.
"""

import asyncio
import logging
import weakref
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hami.cache.store import ClusterCache
from hami.engine import names
from hami.engine.codec import encode_pod_devices
from hami.engine.model import PodDevices
from hami.kube.client import Kube
from hami.kube.errors import KubeError
from hami.kube.events import EventRecorder
from hami.kube.nodelock import NodeLockContention, lock_node, release_node
from hami.service.annotations import allocation_annotations, allocation_keys, allocation_labels
from hami.service.lockwatch import LockWatch

log = logging.getLogger(__name__)

# Called after the allocation is written and before the Binding is posted,
# e.g. to fill the per-pod object that carries limits (fail closed: an error
# aborts the bind).
BeforeBinding = Callable[[str, str, str, PodDevices], Awaitable[None]]


class BindError(Exception):
    """A bind that did not happen; the message is what kube-scheduler reports."""


@dataclass(frozen=True, slots=True)
class _Plan:
    devices: PodDevices
    n_init: int


class Binder:
    def __init__(
        self,
        kube: Kube,
        cache: ClusterCache,
        events: EventRecorder,
        *,
        now: Callable[[], datetime],
        locks: LockWatch,
        lock_expiry: timedelta = timedelta(minutes=5),
        lock_wait: float = 20.0,
        before_binding: BeforeBinding | None = None,
    ) -> None:
        self.kube = kube
        self.lock_wait = lock_wait
        self.cache = cache
        self.events = events
        self.now = now
        self.lock_expiry = lock_expiry
        self.locks = locks
        self.before_binding = before_binding
        # Binds waiting for one node's lock, served in arrival order (asyncio.Lock is FIFO).
        self._queues: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._in_flight: set[asyncio.Task[None]] = set()
        self._binding: Counter[tuple[str, str]] = Counter()  # (namespace, name) of binds under way
        # uid -> node of binds that succeeded lately: a retry whose first
        # attempt succeeded must not take the node lock again, or the lock
        # would outlive the device plugin's Allocate and block the node.
        self._recent: OrderedDict[str, str] = OrderedDict()

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Bind or raise BindError. Runs shielded, so a disconnecting caller cannot cut a bind in half."""
        task = asyncio.ensure_future(self._bind(namespace, name, uid, node))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)
        await asyncio.shield(task)

    async def drain(self, within: float) -> int:
        """Wait for binds under way (graceful shutdown); returns how many did not finish."""
        pending = set(self._in_flight)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=within)
        return len(pending)

    async def _plan(self, namespace: str, name: str, uid: str, node: str) -> _Plan | None:
        """What to bind, or None when the pod is already bound to `node` (a retried bind)."""
        if uid and self._recent.get(uid) == node:
            return None
        res = self.cache.reservation(uid)
        if res is not None and res.node == node:
            return _Plan(res.devices, res.n_init)
        pod = await self.kube.get_pod(namespace, name)
        if pod is None:
            self.cache.forget(uid)
            raise BindError(f"pod {namespace}/{name} not found")
        spec = pod.get("spec") or {}
        if spec.get("nodeName") == node:
            return None
        # A restart between writing the allocation and posting the Binding: the annotations
        # the earlier bind wrote are the decision, as far as they add up (only the scheduler
        # may write them, and the cache's vetting holds them to the pod's own request).
        written = self.cache.vetted(pod)
        if written is not None and written.node == node:
            return _Plan(written.devices, written.n_init)
        if self.cache.asks_for_no_gpu(pod):
            # Claimed by the webhook (say `nvidia.com/gpu: 0` beside a gpumem), passed by filter:
            # HAMi binds it with no lock and no allocation, so does this; the device plugin is
            # never asked for it.
            return _Plan((), 0)
        where = f"node {res.node}" if res is not None else "no node"
        raise BindError(
            f"pod {namespace}/{name} has no placement on node {node} (filter chose {where}); "
            "the decision expired or came from another scheduler replica, kube-scheduler will retry"
        )

    async def _bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        self._binding[namespace, name] += 1
        try:
            await self._bind_once(namespace, name, uid, node)
        finally:
            self._binding[namespace, name] -= 1
            if not self._binding[namespace, name]:
                del self._binding[namespace, name]

    async def _bind_once(self, namespace: str, name: str, uid: str, node: str) -> None:
        ref = {"namespace": namespace, "name": name, "uid": uid}
        ctx = {"namespace": namespace, "pod": name, "node": node}
        plan = await self._plan(namespace, name, uid, node)
        if plan is None:
            log.info("pod already bound to this node", extra=ctx)
            return
        # The node lock only tells HAMi's device plugin which pod to allocate; a node registered
        # from GFD labels has none, so nobody would release it and nothing waits for Allocate.
        handshake = self.cache.handshake(node)
        phase = names.PHASE_ALLOCATING if handshake else names.PHASE_SUCCESS
        unix = int(self.now().timestamp())
        needs_lock = handshake and any(plan.devices[plan.n_init :])
        # A lock another pod holds is waited for before anything is written, so that a waiting
        # pod claims nothing in the API. A free one (as the watch shows it) is taken while the
        # allocation is written: both must be in place before the Binding, neither depends on
        # the other, and the device plugin only looks at pods bound to its node.
        wait_first = needs_lock and self.locks.value(node) is not None
        locked = writing = False
        try:
            if wait_first:
                await self._lock(node, namespace, name)
                locked = True
            writes: dict[str, asyncio.Future[Any]] = {}
            # A pod that asks for no card (plan.devices empty) gets the Binding alone, as in HAMi.
            if plan.devices:
                writing = True
                writes["allocation"] = asyncio.ensure_future(
                    self.kube.patch_pod_metadata(
                        namespace,
                        name,
                        allocation_annotations(node, plan.devices, unix, phase),
                        allocation_labels(node),
                    )
                )
            if needs_lock and not wait_first:
                writes["lock"] = asyncio.ensure_future(self._lock(node, namespace, name))
            try:
                await asyncio.gather(*writes.values())
            finally:
                for write in writes.values():
                    write.cancel()
                await asyncio.gather(*writes.values(), return_exceptions=True)
                lock = writes.get("lock")
                if lock is not None:
                    # A write cut short may still have landed; a refused one did not.
                    locked = lock.cancelled() or lock.exception() is None
            if self.before_binding is not None and plan.devices:
                await self.before_binding(namespace, name, uid, plan.devices)
            await self.kube.bind_pod(namespace, name, uid, node)
        except (KubeError, BindError, OSError, asyncio.CancelledError) as e:
            await self._rollback(namespace, name, uid, node, locked, writing)
            message = f"bind {namespace}/{name} to {node} failed: {e}"
            log.warning("bind failed", extra={**ctx, "error": str(e)})
            self.events.record(ref, "Warning", "BindingFailed", message)
            if isinstance(e, asyncio.CancelledError):
                raise
            raise BindError(message) from e
        if uid:
            self._recent[uid] = node
            if len(self._recent) > 10_000:
                self._recent.popitem(last=False)
        log.info(
            "pod bound",
            extra={
                **ctx,
                "allocated": encode_pod_devices(plan.devices),
            },
        )
        self.events.record(
            ref,
            "Normal",
            "BindingSucceed",
            f"Successfully binding node [{node}] to {namespace}/{name}",
        )

    async def _lock(self, node: str, namespace: str, name: str) -> None:
        """Take the node lock, waiting up to lock_wait seconds for the holder's Allocate.

        The device plugin releases the lock within moments of a bind, so a bind
        that waits beats one that fails and goes back into kube-scheduler's
        queue with backoff (HAMi #1367: bursts onto one node). Waiters on one
        node go in arrival order, each woken by the watch when the lock it met
        is released, not by polling the Node.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.lock_wait
        queue = self._queues.get(node)
        if queue is None:
            queue = self._queues[node] = asyncio.Lock()
        try:
            async with asyncio.timeout(self.lock_wait):
                await queue.acquire()
        except TimeoutError:
            raise NodeLockContention(
                f"node {node} has been locked within {self.lock_wait:g}s: node lock contention "
                "(other binds to this node were still waiting for its lock)"
            ) from None
        try:
            while True:
                seen = self.locks.value(node)
                try:
                    await lock_node(
                        self.kube,
                        node,
                        namespace,
                        name,
                        now=self.now,
                        expiry=self.lock_expiry,
                        # Only a free lock is taken on the watch's word; a held one is read
                        # afresh, so a lagging watch never makes a bind wait for nothing.
                        known=self.locks.node(node) if seen is None else None,
                        binding=lambda ns, pod: self._binding[ns, pod] > 0,
                    )
                    return
                except NodeLockContention:
                    left = deadline - loop.time()
                    if left <= 0:
                        raise
                    await self.locks.changed(node, seen, left)
        finally:
            queue.release()

    async def _rollback(
        self, namespace: str, name: str, uid: str, node: str, locked: bool, written: bool
    ) -> None:
        """Undo the lock and (`written`: its write was started, finished or not) the allocation;
        neither undo touches what this bind did not write."""
        self.cache.forget(uid)
        try:
            if written:
                keys = allocation_keys()
                await self.kube.patch_pod_metadata(
                    namespace, name, dict.fromkeys(keys), dict.fromkeys(allocation_labels(node))
                )
            if locked:
                await release_node(self.kube, node, namespace, name)
        except KubeError as e:
            # The lock expires and the pod's next filter replaces the annotations.
            log.warning(
                "bind rollback incomplete",
                extra={"namespace": namespace, "pod": name, "node": node, "error": str(e)},
            )
