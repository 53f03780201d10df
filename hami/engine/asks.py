"""What a pod asks of every device family: NVIDIA's request with each registered family's.

hami.engine.requests reads NVIDIA's resources; each family of hami.engine.families reads its
own (its container_request). A pod asking none of the families gets NVIDIA's request as it
always was, so NVIDIA's pods pay one look per container and family, nothing more.
"""

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from hami.engine.families.registry import Families
from hami.engine.model import FamilyRequest, PodRequest
from hami.engine.requests import ResourceDefaults
from hami.engine.requests import pod_request as nvidia_request


def pod_request(
    spec: Mapping[str, Any],
    defaults: ResourceDefaults,
    *,
    strict: bool = False,
    families: Families,
) -> PodRequest:
    """The pod's per-container asks, NVIDIA's and each family's; raises RequestError (strict)
    or LimitError as hami.engine.requests.pod_request does."""
    request = nvidia_request(spec, defaults, strict=strict)
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    wanted = families.other_resource_set
    if not any(_names_any(c, wanted) for c in containers):
        return request  # an NVIDIA pod: a set lookup per container, nothing more
    asks = tuple(_container(c, families, strict) for c in containers)
    if not any(asks):
        return request
    return replace(request, families=asks)


def _names_any(container: Mapping[str, Any], wanted: frozenset[str]) -> bool:
    resources = container.get("resources") or {}
    return not wanted.isdisjoint(resources.get("limits") or ()) or not wanted.isdisjoint(
        resources.get("requests") or ()
    )


def _container(
    container: Mapping[str, Any], families: Families, strict: bool
) -> tuple[FamilyRequest, ...]:
    if not _names_any(container, families.other_resource_set):
        return ()
    out = []
    for family in families.others:
        ask = family.container_request(container, strict=strict)
        if ask is not None:
            out.append(ask)
    return tuple(out)


def family_annotations(
    annotations: Mapping[str, str], families: Families
) -> tuple[tuple[str, str], ...]:
    """The pod annotations the families' fits read (FamilyWire.pod_annotations), sorted."""
    keys = {k for f in families.others for k in f.wire.pod_annotations()}
    return tuple(sorted((k, v) for k, v in annotations.items() if k in keys))
