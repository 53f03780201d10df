"""A bind's side of HAMi's node lock: wait for it in turn, take it, give it back.

The device plugin releases a node's lock within moments of a bind, so a bind
that waits beats one that fails and goes back into kube-scheduler's queue
with backoff (HAMi #1367: bursts onto one node). Waiters on one node go in
arrival order, each woken by the watch when the lock it met is released (or
by the end of its leadership term), not by polling the Node.
"""

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from hami.kube.api import KubeAPI
from hami.kube.errors import KubeError
from hami.kube.leader import Term
from hami.service.deadline import Deadline
from hami.service.nodelock.table import NodeLocks
from hami.service.nodelock.wire import LockSpec, NodeLockContention, lock_holder
from hami.service.nodelock.writes import lock_node, release_node

log = logging.getLogger(__name__)

# How long a lock this process took for one of its binds is taken on trust: the device plugin
# releases it within moments, and a bind queued behind it waits for the watch to say so rather
# than reading the Node and the holder pod. Past this, the lock rules decide as for any lock.
OWN_LOCK_TRUST = 5.0


class NodeLocker:
    def __init__(
        self,
        kube: KubeAPI,
        locks: NodeLocks,
        *,
        now: Callable[[], datetime],
        expiry: timedelta,
        write_timeout: float,
        binding: Callable[[str, str, str], bool],
    ) -> None:
        """`binding(namespace, name, node)` says whether a bind of that pod to that node is
        under way here."""
        self.write_timeout = write_timeout
        self.kube = kube
        self.locks = locks
        self.now = now
        self.expiry = expiry
        self.binding = binding
        # Binds waiting for one lock of one node (node, annotation), served in arrival order
        # (asyncio.Lock is FIFO).
        self._queues: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        # node -> binds of ours waiting for or taking its lock; and how many in all.
        self._waiting: dict[str, int] = {}
        self._queued = 0
        self._fewer = asyncio.Event()
        locks.listen(lambda _: self._fewer.set())  # a lock released, or handed on
        # (node, lock annotation, namespace, name) of binds whose lock write went out and got no
        # answer (yet), with the value it wrote: it may have landed though neither we nor the
        # watch have seen it.
        self._unanswered: dict[tuple[str, str, str, str], str] = {}

    async def room(self, limit: int, within: float) -> None:
        """Wait, at most `within` seconds, until fewer than `limit` binds wait for node locks or
        hold one: a node's lock held by a pod bound there (its device plugin allocating) is one
        bind more that the next bind to that node waits out.

        kube-scheduler decides faster than a busy cluster's device plugins allocate; every bind
        beyond what the nodes take in turn would wait past its lock wait, fail and go back to
        the end of kube-scheduler's queue, behind every pod queued meanwhile. Held here, the
        filter slows the decisions down instead, and the pod keeps its place."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, within)):
                while self._queued + self.locks.held() >= limit:
                    self._fewer.clear()
                    await self._fewer.wait()

    def per_node(self, wait: float) -> int:
        """How many binds may wait for or hold each node's lock before filters are held, when a
        bind may wait `wait` seconds for it: a lock held and one bind waiting keep a device
        plugin busy, and the one waiting is served in time while locks are held for less than
        half of `wait` (the rest for the hand-over and its own lock write, which a loaded API
        server answers in seconds); past that, it would run out, fail and lose its place in
        kube-scheduler's queue, so only nodes whose lock is free take binds. So too before any
        lock has been seen released: how long they are held is not known yet."""
        hold = self.locks.hold
        return 2 if hold > 0 and hold * 2 <= wait else 1

    def busy(self) -> dict[str, int]:
        """How many binds a bind to each node would wait for now, for the nodes where any
        would: binds of ours waiting for or taking its lock, and the lock's holder (a device
        plugin allocating for the last pod bound there). Only those nodes: a filter asks with
        every candidate, and a count per candidate cost as much as the decision."""
        ahead = dict(self._waiting)
        for node in self.locks.held_nodes():
            ahead[node] = ahead.get(node, 0) + 1
        return ahead

    def _written(self, node: Mapping[str, Any], key: str) -> None:
        """A Node as one of our lock writes returned it: known before the watch shows it."""
        self.locks.written(node, asyncio.get_running_loop().time(), key)

    def _trusted(self, node: str, seen: str | None, key: str, pod: tuple[str, str]) -> bool:
        """Whether `seen` is a lock this process took moments ago for another pod than `pod`.
        One that names `pod` is its own, taken at once as HAMi does: an earlier bind of it
        that met an unknown outcome left it for the device plugin."""
        since = self.locks.written_at(node, key)
        if since is None or seen is None or self.locks.value(node, key) != seen:
            return False
        if lock_holder(seen) == pod:
            return False
        return asyncio.get_running_loop().time() - since < OWN_LOCK_TRUST

    def _spec(self, lock: LockSpec | None) -> LockSpec:
        return lock or LockSpec(expiry=self.expiry)

    async def take(
        self,
        node: str,
        namespace: str,
        name: str,
        term: Term,
        wait: Deadline,
        lock: LockSpec | None = None,
    ) -> str:
        """Take `lock` (HAMi's unless given) for namespace/name, waiting until `wait` for the
        holder to let go, and return the value written; raises NodeLockContention when it did
        not, NotLeading when `term` ends first."""
        spec = self._spec(lock)
        self._waiting[node] = self._waiting.get(node, 0) + 1
        self._queued += 1
        try:
            value = await self._take(node, namespace, name, term, wait, spec)
            # Taken: nothing to give back unless the bind fails, which names the value.
            self._unanswered.pop((node, spec.key, namespace, name), None)
            return value
        finally:
            self._queued -= 1
            self._fewer.set()
            left = self._waiting.pop(node) - 1
            if left:
                self._waiting[node] = left

    async def _take(
        self, node: str, namespace: str, name: str, term: Term, wait: Deadline, spec: LockSpec
    ) -> str:
        waiting = max(0.0, wait.left())
        key = spec.key
        queue = self._queues.get((node, key))
        if queue is None:
            queue = self._queues[node, key] = asyncio.Lock()
        try:
            async with wait.step():
                await queue.acquire()
        except TimeoutError:
            raise NodeLockContention(
                f"node {node} has been locked within {waiting:.3g}s: node lock "
                "contention (other binds to this node were still waiting for its lock)"
            ) from None
        contention: NodeLockContention | None = None  # what the last attempt met
        noted = False  # whether the wait was logged
        context = {"namespace": namespace, "pod": name, "node": node}
        mine = (node, key, namespace, name)
        values: list[str] = []  # what the write about to be sent holds

        def sending() -> None:
            term.check()
            self._unanswered[mine] = values[-1]

        def answered(patched: Mapping[str, Any]) -> None:
            self._unanswered.pop(mine, None)
            self._written(patched, key)

        try:
            while True:
                term.check()
                seen = self.locks.value(node, key)
                if self._trusted(node, seen, key, (namespace, name)):
                    contention = NodeLockContention(
                        f"node {node} has been locked within {waiting:.3g}s: node lock "
                        "contention (held by a pod this scheduler bound moments ago, whose "
                        "devices are being allocated)"
                    )
                else:
                    try:
                        async with wait.step():
                            return await lock_node(
                                self.kube,
                                node,
                                namespace,
                                name,
                                now=self.now,
                                expiry=self.expiry,
                                write_timeout=self.write_timeout,
                                # Only a free lock is taken on the watch's word; a held one is
                                # read afresh, so a lagging watch never makes a bind wait for
                                # nothing.
                                known=self.locks.node(node, key) if seen is None else None,
                                binding=self.binding,
                                written=answered,
                                fence=sending,
                                lock=spec,
                                sending=values.append,
                            )
                    except NodeLockContention as e:
                        contention = e
                    except TimeoutError:
                        # The wait ran out during an attempt: what the holder did is the reason.
                        if contention is None:
                            raise
                        raise contention from None
                if wait.left() <= 0:
                    raise contention
                if not noted:
                    noted = True  # worth a line: the bind's time goes into waiting for the holder
                    log.info(
                        "node lock held, waiting for it",
                        extra={**context, "lock": key, "held": seen or ""},
                    )
                await _first(self.locks.changed(node, seen, wait.left(), key), term.ended.wait())
        finally:
            queue.release()

    async def give_back(
        self,
        node: str,
        namespace: str,
        name: str,
        lock: LockSpec | None = None,
        value: str | None = None,
    ) -> None:
        """Release the lock (HAMi's unless given) a failed bind may hold; a lock the watch
        shows as another pod's costs no call, unless a lock write of this bind went unanswered
        (it may have landed after what the watch shows), and a failure is only logged (the lock
        rules free such a lock: its holder is neither bound to the node nor being bound).

        A family's own lock names no pod: it is this bind's if it holds `value`, the value
        its take returned, or the value of its unanswered write; other values are left alone
        (HAMi's ReleaseNodeLock removes any)."""
        spec = self._spec(lock)
        sent = self._unanswered.pop((node, spec.key, namespace, name), None)
        mine = frozenset(v for v in (value, sent) if v)
        held = self.locks.value(node, spec.key) or ""
        if spec.names_pod:
            if held and not held.endswith(f",{namespace},{name}") and sent is None:
                return
        elif not mine or (held not in mine and sent is None):
            return
        try:
            # A few attempts at most (each a read and a write), whatever the API server does.
            async with asyncio.timeout(3 * self.write_timeout):
                await release_node(
                    self.kube,
                    node,
                    namespace,
                    name,
                    write_timeout=self.write_timeout,
                    written=lambda patched: self._written(patched, spec.key),
                    lock=spec,
                    values=mine,
                )
        except (KubeError, TimeoutError) as e:
            log.warning(
                "node lock not released",
                extra={
                    "namespace": namespace,
                    "pod": name,
                    "node": node,
                    "lock": spec.key,
                    "error": str(e) or type(e).__name__,
                },
            )


async def _first(*waits: Awaitable[object]) -> None:
    """Return as soon as any of `waits` does, cancelling the rest."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)
