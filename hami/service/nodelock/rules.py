"""When a bind may take HAMi's node lock: a pure decision over the lock value and its holder pod.

HAMi v2.10 frees someone else's lock only at expiry (5 minutes) or when the
holder pod is gone. That leaves a node blocked for the full expiry whenever a
bind died after taking the lock (a killed scheduler): the holder is then
rescheduled and runs elsewhere, yet still "holds" this node. The lock only
exists so that HAMi's device plugin, which allocates for whatever pod the lock
names, finds the right pod; so a holder the plugin can no longer be asked
about on this node frees the lock at once, and a holder it may still be asked
about keeps it, past expiry too when it is already bound here.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum, StrEnum
from typing import Any

from hami.engine import names
from hami.engine.codec import CodecError
from hami.service.nodelock.wire import decode_node_lock

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
_FINISHED_BIND_PHASES = frozenset({names.PHASE_SUCCESS, names.PHASE_FAILED})


class Action(Enum):
    SET = "set"  # no lock: write ours
    HELD = "held"  # already ours: nothing to write
    TAKE_OVER = "take-over"  # overwrite the lock: nobody can still need it
    ASK_HOLDER = "ask-holder"  # the answer depends on the holder pod: read it, decide again
    CONTEND = "contend"  # the holder may still need it


class Reason(StrEnum):
    UNLOCKED = "unlocked"
    OURS = "ours"
    UNREADABLE = "unreadable"
    EXPIRED = "expired"
    UNNAMED = "unnamed-holder"
    UNKNOWN = "holder-unknown"
    GONE = "holder-gone"
    TERMINAL = "holder-terminal"
    BOUND_ELSEWHERE = "holder-bound-elsewhere"
    ALLOCATED = "holder-allocation-finished"
    RUNNING = "holder-running"
    ASSIGNED_ELSEWHERE = "holder-assigned-elsewhere"
    DELETED_UNBOUND = "holder-deleted-unbound"
    BINDING = "holder-binding"
    ORPHANED = "holder-orphaned"
    AWAITING_ALLOCATE = "holder-awaiting-allocate"


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: Reason


@dataclass(frozen=True, slots=True)
class Holder:
    """What the lock holder's pod, read from the API server, says about its bind."""

    exists: bool = True
    phase: str = "Pending"  # status.phase
    node_name: str = ""  # spec.nodeName: set once the Binding is posted
    assigned_node: str = ""  # hami.io/vgpu-node: the node its latest bind wrote
    bind_phase: str = ""  # hami.io/bind-phase: the device plugin's verdict
    bind_time: int | None = None  # hami.io/bind-time, unix seconds, written with vgpu-node
    deleting: bool = False  # metadata.deletionTimestamp is set
    # Whether a bind of this scheduler is under way for it to the lock's node; True when
    # unknown. Only the Lease holder binds, so "no" from it means no bind is, after a short
    # grace. A bind of the holder to another node leaves this lock to nobody: its earlier
    # attempt here failed with its write unanswered.
    being_bound: bool = True


GONE = Holder(exists=False)


def holder_state(pod: Mapping[str, Any] | None) -> Holder:
    if pod is None:
        return GONE
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    try:
        bind_time: int | None = int(annotations.get(names.BIND_TIME, ""))
    except ValueError:
        bind_time = None
    return Holder(
        phase=(pod.get("status") or {}).get("phase") or "Pending",
        node_name=(pod.get("spec") or {}).get("nodeName") or "",
        assigned_node=annotations.get(names.ASSIGNED_NODE) or "",
        bind_phase=annotations.get(names.BIND_PHASE) or "",
        bind_time=bind_time,
        deleting=bool(metadata.get("deletionTimestamp")),
    )


def decide_lock(
    existing: str | None,
    now: datetime,
    expiry: timedelta,
    node: str,
    namespace: str,
    name: str,
    holder: Holder | None,
    orphan_after: timedelta = timedelta(seconds=15),
) -> Decision:
    """What pod namespace/name, binding to `node`, should do about the node's lock value.

    `holder` is None until asked for (ASK_HOLDER). A value that is not a lock
    at all cannot belong to a working HAMi component, so it is overwritten
    rather than wedging the node. A legacy lock (bare time) names no holder,
    so only its expiry can free it.
    """
    if not existing:
        return Decision(Action.SET, Reason.UNLOCKED)
    try:
        since, holder_ns, holder_name = decode_node_lock(existing)
    except CodecError:
        return Decision(Action.TAKE_OVER, Reason.UNREADABLE)
    expired = now - since > expiry
    if holder_ns is None or (holder_ns, holder_name) == (namespace, name):
        if expired:
            return Decision(Action.TAKE_OVER, Reason.EXPIRED)
        if holder_ns is None:
            return Decision(Action.CONTEND, Reason.UNNAMED)
        return Decision(Action.HELD, Reason.OURS)
    if holder is None:
        return Decision(Action.ASK_HOLDER, Reason.UNKNOWN)
    done = _done_here(holder, node, since)
    if done is not None:
        return Decision(Action.TAKE_OVER, done)
    if holder.node_name == node:
        # HAMi's device plugin allocates for the pod the lock names without
        # checking its node: handing this lock on before the holder's Allocate
        # would give its containers the next pod's devices and limits. Every
        # way out of this state (allocated, rejected, deleted, running) frees
        # the lock above, so it is kept past expiry.
        return Decision(Action.CONTEND, Reason.AWAITING_ALLOCATE)
    if expired:
        # Not bound, so the plugin cannot be asked about it, and its bind takes
        # the lock again before posting a Binding.
        return Decision(Action.TAKE_OVER, Reason.EXPIRED)
    if not holder.being_bound and now - since > orphan_after:
        # A scheduler stopped between taking the lock and posting the Binding (kill -9):
        # nobody binds the holder now, and its next bind takes the lock again.
        return Decision(Action.TAKE_OVER, Reason.ORPHANED)
    return Decision(Action.CONTEND, Reason.BINDING)


def _done_here(holder: Holder, node: str, since: datetime) -> Reason | None:
    """Why HAMi's device plugin can no longer allocate for `holder` on `node`, if it cannot."""
    if not holder.exists:
        return Reason.GONE
    if holder.phase in _TERMINAL_PHASES:
        return Reason.TERMINAL
    if holder.node_name and holder.node_name != node:
        return Reason.BOUND_ELSEWHERE
    if holder.bind_phase in _FINISHED_BIND_PHASES:
        return Reason.ALLOCATED
    if holder.node_name and holder.phase == "Running":
        # kubelet allocates devices at admission, before any container starts;
        # this frees a lock whose release the plugin failed to write.
        return Reason.RUNNING
    if holder.node_name:
        return None
    if holder.deleting:
        # The API server refuses to bind a pod that is being deleted.
        return Reason.DELETED_UNBOUND
    # An allocation written after this lock was taken, naming another node:
    # the holder's bind moved on. One written before (a bind on another node
    # that died) says nothing, and in the same second the order is unknown.
    if (
        holder.assigned_node
        and holder.assigned_node != node
        and holder.bind_time is not None
        and holder.bind_time > since.timestamp()
    ):
        return Reason.ASSIGNED_ELSEWHERE
    return None
