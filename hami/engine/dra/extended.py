"""`nvidia.com/gpu` served by DRA through a DeviceClass's `extendedResourceName` (KEP-5004, beta
and on by default since Kubernetes 1.36), as it meets a device-plugin pod.

Measured on kube-scheduler 1.36.3 (tests/e2e/test_dra_extended.py): once any DeviceClass maps
a resource a pod asks, kube-scheduler's DynamicResources plugin checks every extended resource
of the pod on every node, and one that the node does not advertise and no DeviceClass maps
fails the node with "cannot fit resource". The extender's `ignoredByScheduler` does not reach
that plugin, and no node advertises HAMi's `gpumem`, `gpumem-percentage`, `gpucores` or
`priority`: such a pod would wait forever. The webhook refuses it instead, saying what to do.
"""

from collections.abc import Iterable, Mapping
from typing import Any

from hami.engine.requests import ResourceNames


def _asked(pod: Mapping[str, Any]) -> set[str]:
    spec = pod.get("spec") or {}
    out: set[str] = set()
    for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
        resources = c.get("resources") or {}
        for section in ("limits", "requests"):
            out.update(str(name) for name in resources.get(section) or {})
    return out


def _unadvertised(names: ResourceNames) -> Iterable[str]:
    return (names.memory, names.memory_percentage, names.cores, names.priority)


def unschedulable_through_dra(
    pod: Mapping[str, Any], classes: Mapping[str, str], names: ResourceNames
) -> str | None:
    """Why kube-scheduler would never place the pod, as admission stores it, while `classes`
    (DeviceClass name -> its extendedResourceName) map a resource it asks; None if it can."""
    asked = _asked(pod)
    mapped = {resource: name for name, resource in sorted(classes.items()) if resource}
    served = sorted(asked & mapped.keys())
    unfit = sorted(asked.intersection(_unadvertised(names)) - mapped.keys())
    if not served or not unfit:
        return None
    resource = served[0]
    device_class = mapped[resource]
    return (
        f"DeviceClass {device_class} serves {resource} through DRA (spec.extendedResourceName, "
        f"KEP-5004), so kube-scheduler would refuse this pod on every node ('cannot fit "
        f"resource' for {', '.join(unfit)}, which no node advertises); run hami-py's DRA mode "
        "(chart dra.enabled=true; with dra.mode=annotated, annotate the pod "
        f"hami.io/device-world: dra), or remove extendedResourceName from DeviceClass "
        f"{device_class}"
    )
