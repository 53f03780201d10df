"""How a failed bind is reported: the message kube-scheduler shows and a short reason for the
failure metric (hami_bind_failures_total)."""

from hami.kube.errors import KubeError, Unavailable
from hami.kube.leader import NotLeading
from hami.kube.nodelock import NodeLockContention
from hami.service.bindrules import Found, PodState


class BindError(Exception):
    """A bind that did not happen; the message is what kube-scheduler reports."""

    def __init__(self, message: str, reason: str = "api-error") -> None:
        super().__init__(message)
        self.reason = reason  # a short word for the failure metric
        # Whether the bind may hold the node lock and must give it back (after answering).
        self.release_lock = False


def describe(e: BaseException) -> str:
    return str(e) or type(e).__name__


def bound_elsewhere(namespace: str, name: str, node: str, where: str) -> BindError:
    return BindError(
        f"pod {namespace}/{name} is already bound to node {where}, not {node}; nothing was changed",
        "bound-elsewhere",
    )


def from_state(
    state: PodState, namespace: str, name: str, node: str, error: KubeError
) -> BindError:
    if state.found is Found.BOUND_ELSEWHERE:
        return bound_elsewhere(namespace, name, node, state.node)
    if state.found in (Found.GONE, Found.DELETING):
        return BindError(f"pod {namespace}/{name} was deleted while it was being bound", "pod-gone")
    if isinstance(error, Unavailable) and error.status != 429:
        # Unanswered, or failed inside the API server: the Binding may still commit after the
        # pod was read, so the node lock stays for the device plugin (or the lock rules).
        return BindError(
            f"bind {namespace}/{name} to {node}: the Binding went unanswered ({error}); "
            "kube-scheduler will retry",
            "unknown-outcome",
        )
    return BindError(f"bind {namespace}/{name} to {node} failed: {error}", "api-error")


def as_bind_error(e: BaseException, namespace: str, name: str, node: str) -> BindError:
    prefix = f"bind {namespace}/{name} to {node} failed: "
    if isinstance(e, NodeLockContention):
        return BindError(prefix + str(e), "lock-contention")
    if isinstance(e, NotLeading):
        return BindError(prefix + str(e), "not-leader")
    if isinstance(e, TimeoutError):
        return BindError(
            prefix + "out of time: the bind must answer before kube-scheduler's extender timeout; "
            "kube-scheduler will retry",
            "deadline",
        )
    return BindError(prefix + describe(e), "api-error")
