"""What must hold before `hami serve` may decide anything: the admission policy is in force.

Without the chart's ValidatingAdmissionPolicy, anyone who may edit a pod may rewrite its
allocation annotations. A running process is not fooled (hami.engine.trust counts a bound pod
by what it was bound with), but that memory is all there is: the annotations are the only
record in the cluster of which cards the device plugin handed out, and a restarted process
can read nothing else. It would count the edited pod on the cards the edit names, and hand
the pod's real cards to the next pod. No restart-time rule can tell which cards are real, so
the process refuses to start unless the policy is there, or an administrator accepted the
risk in so many words.
"""

import logging

from hami.kube.client import Kube
from hami.kube.errors import KubeError

log = logging.getLogger(__name__)


def _risk(binding: str) -> str:
    return (
        f"the ValidatingAdmissionPolicyBinding {binding} is not in force, so anyone who may "
        "edit a pod may rewrite its hami.io/ allocation annotations; this process ignores such "
        "edits while it runs, but a restarted one can only read what the edit left, and would "
        "hand the pod's real cards to the next pod"
    )


async def require_admission_policy(kube: Kube, binding: str, allow_without: bool) -> None:
    """Raise OSError (main() exits 2 with the message) unless `binding` exists or
    `allow_without` is set."""
    try:
        found = await kube.get_admission_policy_binding(binding)
        why = "" if found is not None else "it does not exist"
    except KubeError as e:
        # 404 for the kind itself (before Kubernetes 1.30), 403 without the chart's RBAC.
        found, why = None, f"it cannot be read: {e}"
    if found is not None:
        return
    if allow_without:
        log.warning(
            "starting without the admission policy, as allowed",
            extra={"binding": binding, "why": why, "risk": _risk(binding)},
        )
        return
    raise OSError(
        f"{_risk(binding)} ({why}). Install the chart's admission policy (Kubernetes 1.30 or "
        "later, admissionPolicy.enabled=true), or accept the risk with "
        "--allow-without-admission-policy=true (the chart's "
        "admissionPolicy.allowSchedulerWithout=true)"
    )
