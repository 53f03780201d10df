"""What a pod asks of every device family: NVIDIA's request with each registered family's.

hami.engine.requests reads NVIDIA's resources; each family of hami.engine.families reads its
own (its container_request). A pod asking none of the families gets NVIDIA's request as it
always was, so NVIDIA's pods pay one look per container and family, nothing more.
"""

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from hami.engine.families.registry import FAMILIES, Families
from hami.engine.model import FamilyRequest, PodRequest
from hami.engine.requests import ResourceDefaults
from hami.engine.requests import pod_request as nvidia_request


def pod_request(
    spec: Mapping[str, Any],
    defaults: ResourceDefaults,
    *,
    strict: bool = False,
    families: Families = FAMILIES,
) -> PodRequest:
    """The pod's per-container asks, NVIDIA's and each family's; raises RequestError (strict)
    or LimitError as hami.engine.requests.pod_request does."""
    request = nvidia_request(spec, defaults, strict=strict)
    if not families.members:
        return request
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    asks = tuple(_container(c, families, strict) for c in containers)
    if not any(asks):
        return request
    return replace(request, families=asks)


def _container(
    container: Mapping[str, Any], families: Families, strict: bool
) -> tuple[FamilyRequest, ...]:
    out = []
    for family in families:
        ask = family.container_request(container, strict=strict)
        if ask is not None:
            out.append(ask)
    return tuple(out)


def names_family(spec: Mapping[str, Any], families: Families = FAMILIES) -> bool:
    """Whether any container names a resource of some family (requests or limits)."""
    wanted = set(families.resource_names())
    for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
        resources = c.get("resources") or {}
        for section in ("limits", "requests"):
            if wanted.intersection(resources.get(section) or {}):
                return True
    return False


def family_annotations(
    annotations: Mapping[str, str], families: Families = FAMILIES
) -> tuple[tuple[str, str], ...]:
    """The pod annotations the families' fits read (FamilyWire.pod_annotations), sorted."""
    keys = {k for f in families for k in f.wire.pod_annotations()}
    return tuple(sorted((k, v) for k, v in annotations.items() if k in keys))
