"""What the webhook does for a pod's containers that other device families claim.

HAMi's webhook asks each device family whether it claims a container (MutateAdmission); a pod
with a claimed container is scheduled by HAMi. Here each family's `claim` answers, and the pod
fields a family sets when absent (Ascend's runtimeClassName) are set once. As HAMi's webhook
lets every family's MutateAdmission change every container of a pod it takes, what a family
sets in a container it does not claim (Ascend's empty ASCEND_VISIBLE_DEVICES with
`overwriteEnv`) is applied whoever claims the pod, NVIDIA-only pods included. Nothing of
NVIDIA's node-side injection is applied for these containers: that is for pods asking
NVIDIA's resources.
"""

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from hami.engine.asks import pod_request
from hami.engine.families.base import Claim
from hami.engine.families.registry import Families
from hami.engine.requests import RequestError, ResourceDefaults


@lru_cache(maxsize=8)
def family_owned_keys(families: Families) -> frozenset[str]:
    """The pod annotations a bind writes for the families' device plugins: only the
    scheduler may."""
    return frozenset(
        k
        for f in families.others
        for k in (f.wire.to_allocate_annotation, f.wire.allocated_annotation)
    )


def claim_families(
    pod: dict[str, Any],
    containers: Sequence[dict[str, Any]],
    resources: ResourceDefaults,
    families: Families,
) -> bool:
    """Whether some family claims one of the pod's containers. What the families' claims set
    is applied, claimed or not (HAMi's webhook keeps what every MutateAdmission changed):
    each container's limits and requests (replacing the values there) and environment
    variables (where the container has none of that name), the pod's annotations, and the
    pod fields that are absent. Raises RequestError when a family refuses the pod, or when a
    claimed pod's asks cannot be read (strictly, naming the value, as for NVIDIA's)."""
    claims: list[tuple[dict[str, Any], Claim]] = []
    for container in containers:
        for family in families.others:
            claim = family.claim(container, pod)
            if claim.error:
                raise RequestError(claim.error)
            claims.append((container, claim))
    spec = pod["spec"]
    for container, claim in claims:
        _apply(container, pod, claim)
        for key, value in claim.pod_fields:
            if not spec.get(key):
                spec[key] = value
    if not any(claim.claimed for _, claim in claims):
        return False
    pod_request(spec, resources, strict=True, families=families)
    return True


def _apply(container: dict[str, Any], pod: dict[str, Any], claim: Claim) -> None:
    if claim.limits or claim.requests:
        resources = container.setdefault("resources", {})
        for section, values in (("limits", claim.limits), ("requests", claim.requests)):
            if values:
                resources.setdefault(section, {}).update(values)
    if claim.env:
        env = container.setdefault("env", [])
        named = {e.get("name") for e in env}
        env.extend({"name": k, "value": v} for k, v in claim.env if k not in named)
    if claim.annotations:
        pod.setdefault("metadata", {}).setdefault("annotations", {}).update(claim.annotations)
