"""How a failed bind is reported: the message kube-scheduler shows and a short reason for the
failure metric (hami_bind_failures_total)."""

from enum import StrEnum

from hami.engine.versions import later
from hami.kube.errors import KubeError, Unavailable
from hami.kube.leader import NotLeading
from hami.service.bindrules import Found, PodState
from hami.service.nodelock.wire import NodeLockContention


class BindFailure(StrEnum):
    """Why a bind failed: the `reason` label of hami_bind_failures_total. The metric's help, the
    README and the dashboard name every one (tests/unit/test_vocabularies.py)."""

    LOCK_CONTENTION = "lock-contention"  # the node's lock is held by a pod still being allocated
    DEADLINE = "deadline"  # out of kube-scheduler's extender timeout
    NOT_LEADER = "not-leader"  # this replica does not lead, or its term ended
    BOUND_ELSEWHERE = "bound-elsewhere"  # another bind placed the pod
    POD_GONE = "pod-gone"  # deleted, or a new pod under the name
    NO_PLACEMENT = "no-placement"  # no filter decision of this replica for that node
    CARD_TAKEN = "card-taken"  # another replica's bind landed on the card after a hand-over
    UNKNOWN_OUTCOME = "unknown-outcome"  # the Binding went unanswered: it may still commit
    API_ERROR = "api-error"  # any other refusal of the API server


class BindError(Exception):
    """A bind that did not happen; the message is what kube-scheduler reports."""

    def __init__(self, message: str, reason: BindFailure = BindFailure.API_ERROR) -> None:
        super().__init__(message)
        self.reason = BindFailure(reason)  # an unknown reason is an error here, not a new label
        # Whether the bind may hold the node lock and must give it back (after answering).
        self.release_lock = False


def describe(e: BaseException) -> str:
    return str(e) or type(e).__name__


def bound_elsewhere(namespace: str, name: str, node: str, where: str) -> BindError:
    return BindError(
        f"pod {namespace}/{name} is already bound to node {where}, not {node}; nothing was changed",
        BindFailure.BOUND_ELSEWHERE,
    )


def from_state(
    state: PodState, namespace: str, name: str, node: str, error: KubeError, sent_for: str = ""
) -> BindError:
    """What a Binding that failed with `error` comes to, the pod read back as `state`; the
    Binding was sent for resourceVersion `sent_for` ("": without that precondition)."""
    if state.found is Found.BOUND_ELSEWHERE:
        return bound_elsewhere(namespace, name, node, state.node)
    if state.found in (Found.GONE, Found.DELETING):
        return BindError(
            f"pod {namespace}/{name} was deleted while it was being bound", BindFailure.POD_GONE
        )
    if (
        isinstance(error, Unavailable)
        and error.status != 429
        and not later(state.resource_version, sent_for)
    ):
        # Unanswered, or failed inside the API server: the Binding may still commit after the
        # pod was read (unless the pod has changed since, which its precondition forbids), so
        # the node lock stays for the device plugin, or for the pod's read-back to give back.
        return BindError(
            f"bind {namespace}/{name} to {node}: the Binding went unanswered ({error}); "
            "kube-scheduler will retry",
            BindFailure.UNKNOWN_OUTCOME,
        )
    return BindError(f"bind {namespace}/{name} to {node} failed: {error}", BindFailure.API_ERROR)


def as_bind_error(e: BaseException, namespace: str, name: str, node: str) -> BindError:
    prefix = f"bind {namespace}/{name} to {node} failed: "
    if isinstance(e, NodeLockContention):
        return BindError(prefix + str(e), BindFailure.LOCK_CONTENTION)
    if isinstance(e, NotLeading):
        return BindError(prefix + str(e), BindFailure.NOT_LEADER)
    if isinstance(e, TimeoutError):
        return BindError(
            prefix + "out of time: the bind must answer before kube-scheduler's extender timeout; "
            "kube-scheduler will retry",
            BindFailure.DEADLINE,
        )
    return BindError(prefix + describe(e), BindFailure.API_ERROR)
