"""What the webhook does for a pod's containers that other device families claim.

HAMi's webhook asks each device family whether it claims a container (MutateAdmission); a pod
with a claimed container is scheduled by HAMi. Here each family's `claim` answers, and the pod
fields a family sets when absent (Ascend's runtimeClassName) are set once. Nothing of NVIDIA's
node-side injection is applied for these containers: that is for pods asking NVIDIA's resources.
"""

from collections.abc import Sequence
from typing import Any

from hami.engine.asks import pod_request
from hami.engine.families.registry import FAMILIES, Families
from hami.engine.requests import RequestError, ResourceDefaults

# The pod annotations a bind writes for the families' device plugins: only the scheduler may.
FAMILY_OWNED_KEYS = frozenset(
    k for f in FAMILIES for k in (f.wire.to_allocate_annotation, f.wire.allocated_annotation)
)


def claim_families(
    pod: dict[str, Any],
    containers: Sequence[dict[str, Any]],
    resources: ResourceDefaults,
    families: Families = FAMILIES,
) -> bool:
    """Whether some family claims one of the pod's containers; sets the families' pod fields
    that are absent. Raises RequestError when a family refuses the pod, or when a claimed
    pod's asks cannot be read (strictly, naming the value, as for NVIDIA's)."""
    fields: dict[str, str] = {}
    claimed = False
    for container in containers:
        for family in families:
            claim = family.claim(container, pod)
            if claim.error:
                raise RequestError(claim.error)
            if claim.claimed:
                claimed = True
                for key, value in claim.pod_fields:
                    fields.setdefault(key, value)
    if not claimed:
        return False
    pod_request(pod["spec"], resources, strict=True, families=families)
    spec = pod["spec"]
    for key, value in fields.items():
        if not spec.get(key):
            spec[key] = value
    return True
