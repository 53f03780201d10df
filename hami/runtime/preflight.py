"""What must hold before `hami serve` may decide anything: the admission policy is in force
(and, with the DRA bookkeeping, the DRA objects can be listed: require_dra_api).

Without the chart's ValidatingAdmissionPolicy, anyone who may edit a pod may rewrite its
allocation annotations. A running process is not fooled (hami.engine.trust counts a bound pod
by what it was bound with), but that memory is all there is: the annotations are the only
record in the cluster of which cards the device plugin handed out, and a restarted process
can read nothing else. It would count the edited pod on the cards the edit names, and hand
the pod's real cards to the next pod. No restart-time rule can tell which cards are real, so
the process refuses to start unless the policy is there, or an administrator accepted the
risk in so many words.
"""

import asyncio
import contextlib
import logging

from hami.kube.client import Kube
from hami.kube.errors import KubeError, NotFound, Unavailable
from hami.kube.listwatch import DRA_RESOURCES

log = logging.getLogger(__name__)

WAIT = 20.0  # seconds a missing binding is waited for at start


async def _read(kube: Kube, binding: str) -> tuple[bool, str]:
    """Whether the binding exists, and why not. Raises Unavailable when the API server did not
    answer: that says nothing of the policy."""
    try:
        found = await kube.get_admission_policy_binding(binding)
    except Unavailable:
        raise
    except KubeError as e:
        # 404 for the kind itself (before Kubernetes 1.30), 403 without the chart's RBAC.
        return False, f"it cannot be read: {e}"
    return found is not None, "" if found is not None else "it does not exist"


def _risk(binding: str) -> str:
    return (
        f"the ValidatingAdmissionPolicyBinding {binding} is not in force, so anyone who may "
        "edit a pod may rewrite its hami.io/ allocation annotations; this process ignores such "
        "edits while it runs, but a restarted one can only read what the edit left, and would "
        "hand the pod's real cards to the next pod"
    )


async def require_admission_policy(
    kube: Kube, binding: str, allow_without: bool, wait: float = WAIT, every: float = 2.0
) -> None:
    """Raise OSError (main() exits 2 with the message) unless `binding` exists or
    `allow_without` is set. A binding not there yet is waited for up to `wait` seconds: Helm
    creates it after the Deployment (it orders kinds it does not know last)."""
    deadline = asyncio.get_running_loop().time() + wait
    while True:
        unanswered: Unavailable | None = None
        try:
            found, why = await _read(kube, binding)
        except Unavailable as e:
            found, why, unanswered = False, f"it cannot be read: {e}", e
        if found or allow_without or asyncio.get_running_loop().time() >= deadline:
            break
        log.info(
            "waiting for the API server" if unanswered else "waiting for the admission policy",
            extra={"binding": binding, "why": why},
        )
        await asyncio.sleep(every)
    if found:
        return
    if allow_without:
        log.warning(
            "starting without the admission policy, as allowed",
            extra={"binding": binding, "why": why, "risk": _risk(binding)},
        )
        return
    if unanswered is not None:
        raise OSError(
            f"cannot tell whether the admission policy is in force: {unanswered} (is the API "
            "server up, and the kubeconfig's server the right one?)"
        )
    raise OSError(
        f"{_risk(binding)} ({why}). Install the chart's admission policy (Kubernetes 1.30 or "
        "later, admissionPolicy.enabled=true), or accept the risk with "
        "--allow-without-admission-policy=true (the chart's "
        "admissionPolicy.allowSchedulerWithout=true)"
    )


async def require_dra_api(kube: Kube) -> None:
    """With --dra-bookkeeping, the DRA objects must be readable: an informer that can never
    list keeps the cache from syncing, and the process from ever becoming ready. Raise OSError
    (main() exits 2) naming the fix where the API server serves no resource.k8s.io/v1 or
    refuses us; an API server that does not answer is the informers' to wait out."""
    for resource in DRA_RESOURCES:
        try:
            pages = kube.list_pages(resource)
            async with contextlib.aclosing(pages):
                await anext(pages)
        except Unavailable:
            return
        except NotFound as e:
            raise OSError(
                f"the API server serves no resource.k8s.io/v1 {resource} ({e}): on Kubernetes "
                "before 1.34 run with --dra-bookkeeping=false (chart: "
                "scheduler.draBookkeeping=false)"
            ) from e
        except KubeError as e:
            raise OSError(
                f"cannot list resource.k8s.io/v1 {resource} ({e}): the DRA bookkeeping needs "
                "list and watch of resourceslices, resourceclaims and deviceclasses (the "
                "chart's ClusterRole grants them), or --dra-bookkeeping=false"
            ) from e
