"""One write of a node's lock against the API server: take it, or release it.

When someone else's lock may be taken over is decided in hami.service.nodelock.rules. Writes
carry the node's resourceVersion, so two writers can never both believe they took the lock:
the slower one gets a 409, re-reads and decides again. HAMi's lock is written unless a
LockSpec names a family's own (hami.service.nodelock.wire).
"""

import asyncio
import logging
import random
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from hami.kube.api import KubeAPI
from hami.kube.calls import Fence
from hami.kube.errors import Conflict, NotFound, Unavailable
from hami.service.nodelock.rules import Action, Decision, Reason, decide_lock, holder_state
from hami.service.nodelock.wire import (
    DEFAULT_EXPIRY,
    LockSpec,
    NodeLockContention,
    decode_node_lock,
    go_duration,
    owns,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """client-go's wait.Backoff: `steps` attempts, sleeping duration*(1+jitter*rand) between."""

    steps: int = 5
    duration: float = 0.1
    factor: float = 2.0
    jitter: float = 0.5


DEFAULT_BACKOFF = Backoff()


_mutexes: "weakref.WeakValueDictionary[str, asyncio.Lock]" = weakref.WeakValueDictionary()


def _mutex(node: str) -> asyncio.Lock:
    """One lock per node, dropped once no coroutine holds or waits for it."""
    mutex = _mutexes.get(node)
    if mutex is None:
        mutex = asyncio.Lock()
        _mutexes[node] = mutex
    return mutex


async def _retrying(
    attempt: Callable[[], Awaitable[T]], backoff: Backoff, context: Mapping[str, str]
) -> T:
    """Run `attempt` until it succeeds, retrying only races (409) and transient failures."""
    delay = backoff.duration
    for step in range(1, backoff.steps):
        try:
            return await attempt()
        except (Conflict, Unavailable) as e:
            pause = delay * (1 + backoff.jitter * random.random())
            if isinstance(e, Unavailable) and e.retry_after:
                pause = max(pause, e.retry_after)
            log.info(
                "node lock write failed, retrying",
                extra={**context, "attempt": step, "retry_in_s": round(pause, 3), "error": str(e)},
            )
            await asyncio.sleep(pause)
            delay *= backoff.factor
    return await attempt()


async def lock_node(
    kube: KubeAPI,
    node: str,
    namespace: str,
    pod: str,
    *,
    now: Callable[[], datetime],
    expiry: timedelta = DEFAULT_EXPIRY,
    backoff: Backoff = DEFAULT_BACKOFF,
    write_timeout: float | None = None,
    known: Mapping[str, Any] | None = None,
    binding: Callable[[str, str, str], bool] | None = None,
    written: Callable[[Mapping[str, Any]], None] | None = None,
    fence: Fence | None = None,
    lock: LockSpec | None = None,
    sending: Callable[[str], None] | None = None,
) -> str:
    """Take the node's lock for namespace/pod and return its value, or raise
    NodeLockContention.

    `lock` is the lock to take: HAMi's, expiring after `expiry`, unless it names another.
    `sending(value)` is called with each value about to be written, `fence` right before the
    write is sent (hami.kube.calls.ApiCalls._call).

    `binding(namespace, name, node)` says whether this process is binding that pod to this
    node now; without it a holder is always assumed to be.

    `known` is the Node as a watch last showed it: the first attempt decides
    from it and writes with its resourceVersion, saving a read; if it was
    stale the write gets a 409 and the retry reads the Node afresh.

    Raises NotFound when the node does not exist and KubeError subclasses when
    the API server keeps failing.
    """
    spec = lock or LockSpec(expiry=expiry)
    expiry = spec.expiry
    context = {"node": node, "namespace": namespace, "pod": pod, "lock": spec.key}
    first = [known] if known is not None else []
    sent: set[str] = set()  # the values this call wrote: one may have landed unanswered

    async def attempt() -> str:
        obj = first.pop() if first else await kube.get_node(node)
        if obj is None:
            raise NotFound(f"node {node} not found", status=404)
        metadata = obj.get("metadata", {})
        existing = (metadata.get("annotations") or {}).get(spec.key)
        if existing in sent:
            # An earlier attempt's write landed though its answer was lost (a family's own
            # lock names no pod: its value alone says it is ours).
            log.debug("node lock already held by this pod", extra=context)
            return existing or ""
        decision = decide_lock(existing, now(), expiry, node, namespace, pod, None)
        if decision.action is Action.ASK_HOLDER:
            assert existing is not None  # ASK_HOLDER is only decided for a readable lock
            _, holder_ns, holder_name = decode_node_lock(existing)
            holder = holder_state(await kube.get_pod(holder_ns or "", holder_name or ""))
            if binding is not None and holder.exists:
                holder = replace(
                    holder, being_bound=binding(holder_ns or "", holder_name or "", node)
                )
            decision = decide_lock(existing, now(), expiry, node, namespace, pod, holder)
        if decision.action is Action.HELD:
            log.debug("node lock already held by this pod", extra=context)
            return existing or ""
        if decision.action is Action.CONTEND:
            raise NodeLockContention(_contention_message(node, existing or "", spec, decision))
        # An unanswered write may have landed: the retry reads the Node and finds it ours.
        value = spec.encode(now(), namespace, pod)
        sent.add(value)
        if sending is not None:
            sending(value)
        patched = await kube.patch_node_annotations(
            node, {spec.key: value}, metadata["resourceVersion"], write_timeout, fence=fence
        )
        if written is not None:
            written(patched)
        # Taking a free lock is every bind's routine (the bind's own line says where it went);
        # taking one over is worth a line of its own.
        log.log(
            logging.INFO if decision.action is Action.TAKE_OVER else logging.DEBUG,
            "node lock taken over" if decision.action is Action.TAKE_OVER else "node lock taken",
            extra={
                **context,
                "action": decision.action.value,
                "reason": decision.reason.value,
                "previous": existing or "",
            },
        )
        return value

    async with _mutex(node):
        return await _retrying(attempt, backoff, context)


def _contention_message(node: str, value: str, spec: LockSpec, decision: Decision) -> str:
    # HAMi's exact words come first: users and tools grep for them.
    since, holder_ns, holder_name = decode_node_lock(value)
    expiry = spec.expiry
    if not spec.names_pod:
        return (
            f"node {node} has been locked within {spec.within()}: node lock contention "
            f"({spec.key} taken at {since.isoformat()}, naming no pod; the device plugin "
            "removes it once it has allocated the pod bound there before, or it expires "
            f"after {spec.within()})"
        )
    holder = f"pod {holder_ns}/{holder_name}" if holder_ns is not None else "an unnamed pod"
    if decision.reason is Reason.AWAITING_ALLOCATE:
        until = (
            f"that pod is bound to {node} and waits for its devices, so the lock is kept, past "
            f"its {go_duration(expiry)} expiry too, until HAMi's device plugin allocates them, "
            "the pod is rejected or deleted"
        )
    else:
        until = (
            "the lock is released once that pod's devices are allocated, or expires after "
            f"{go_duration(expiry)}"
        )
    return (
        f"node {node} has been locked within {go_duration(expiry)}: node lock contention "
        f"(held by {holder} since {since.isoformat()}; {until})"
    )


async def release_node(
    kube: KubeAPI,
    node: str,
    namespace: str,
    pod: str,
    *,
    backoff: Backoff = DEFAULT_BACKOFF,
    write_timeout: float | None = None,
    written: Callable[[Mapping[str, Any]], None] | None = None,
    lock: LockSpec | None = None,
    values: frozenset[str] = frozenset(),
) -> None:
    """Remove the node's lock if namespace/pod holds it; anyone else's lock is left alone.

    A family's own lock (`lock`) names no pod: it is namespace/pod's if it holds one of the
    `values` that pod's bind wrote."""
    spec = lock or LockSpec()
    context = {"node": node, "namespace": namespace, "pod": pod, "lock": spec.key}

    async def attempt() -> None:
        obj = await kube.get_node(node)
        if obj is None:
            log.info("node is gone, no lock to release", extra=context)
            return
        metadata = obj.get("metadata", {})
        existing = (metadata.get("annotations") or {}).get(spec.key)
        if not existing:
            log.info("node is not locked, nothing to release", extra=context)
            return
        if not (owns(existing, namespace, pod) if spec.names_pod else existing in values):
            log.info(
                "node lock belongs to another pod, left alone",
                extra={**context, "holder": existing},
            )
            return
        patched = await kube.patch_node_annotations(
            node, {spec.key: None}, metadata["resourceVersion"], write_timeout
        )
        if written is not None:
            written(patched)
        log.info("node lock released", extra=context)

    async with _mutex(node):
        await _retrying(attempt, backoff, context)
