"""The other device families' ways past the device plugin, checked at admission.

NVIDIA's are hami.engine.escapes. A family names its own in its FamilyWire:

* `device_env`: what the vendor's container runtime reads to mount devices (Ascend Docker
  Runtime's ASCEND_VISIBLE_DEVICES, the AMD Container Toolkit's AMD_VISIBLE_DEVICES...). On the
  family's nodes any container setting one gets the devices it names, whatever the scheduler
  gave the pod, so it is checked in every container of a pod asking the family; an empty
  value, none or void names no device and passes.
* `share_env`: what the family's device plugin sets to hold its container to its share (an
  Ascend vNPU template, AMD's compute-unit mask, the Neuron cores of a shared device). The
  kubelet lists the container's own environment after the plugin's and the runtime keeps
  the last of a name, so any value there replaces the plugin's; it is checked in the
  containers asking the family.

A value read from elsewhere (valueFrom) is refused as NVIDIA's is, and so is an envFrom that
could set one: one without a prefix that keeps them out, where no env entry names them (env
entries win over envFrom). The checks are pure and read only what the pod's author wrote.
"""

from collections.abc import Iterable, Mapping
from typing import Any

from hami.engine.families.registry import Families

NO_DEVICES = frozenset({"", "none", "void"})
FIELDS = ("initContainers", "containers", "ephemeralContainers")
REMOVE = "remove it (the device plugin sets it)"


def family_escapes(
    pod: Mapping[str, Any], families: Families, skip: Iterable[str] = ()
) -> list[str]:
    """Every variable of a family the pod asks for that would take a container past its
    device plugin; ephemeral containers named in `skip` (those already running) are not read."""
    spec = pod.get("spec") or {}
    skipped = set(skip)
    containers = [
        (f"spec.{field}[{i}]", c)
        for field in FIELDS
        for i, c in enumerate(spec.get(field) or ())
        if not (field == "ephemeralContainers" and c.get("name") in skipped)
    ]
    asked = [
        f for f in families.others if any(_asks(c, f.wire.resources.all()) for _, c in containers)
    ]
    if not asked:
        return []
    problems = []
    for where, container in containers:
        watched: dict[str, tuple[bool, str]] = {}  # variable -> (a share's, the family)
        for family in asked:
            wire = family.wire
            for variable in wire.device_env:
                watched.setdefault(variable, (False, wire.type))
            if _asks(container, wire.resources.all()):
                for variable in wire.share_env:
                    watched[variable] = (True, wire.type)
        if watched:
            problems.extend(_container(container, where, watched))
    return problems


def _asks(container: Mapping[str, Any], names: tuple[str, ...]) -> bool:
    resources = container.get("resources") or {}
    return any(n in (resources.get(s) or {}) for s in ("limits", "requests") for n in names)


def _container(
    container: Mapping[str, Any], where: str, watched: Mapping[str, tuple[bool, str]]
) -> list[str]:
    name = container.get("name")
    problems = []
    env = container.get("env") or ()
    for j, entry in enumerate(env):
        variable = str(entry.get("name") or "")
        if variable not in watched:
            continue
        share, kind = watched[variable]
        at = f"{where}.env[{j}]"
        if entry.get("valueFrom") is not None:
            problems.append(
                f"container {name} reads {variable} from elsewhere ({at}.valueFrom), a value "
                f"admission cannot see and the {kind} devices follow over the device plugin's; "
                f"{REMOVE}"
            )
            continue
        value = str(entry.get("value") or "")
        if share:
            problems.append(
                f"container {name} sets {variable}={value} ({at}): the {kind} device plugin "
                "sets it to hold the container to the share the scheduler gave it, and the "
                f"container's own value replaces the plugin's; {REMOVE}"
            )
        elif value.strip().lower() not in NO_DEVICES:
            problems.append(
                f"container {name} sets {variable}={value} ({at}): the container runtime of "
                f"{kind} nodes would mount the devices it names (every one of the node's with "
                f"all), whatever the scheduler gave the pod; {REMOVE} or set it to none"
            )
    named = {str(e.get("name")) for e in env}
    open_ = [v for v in watched if v not in named]
    for j, source in enumerate(container.get("envFrom") or ()):
        prefix = str(source.get("prefix") or "")
        could = [v for v in open_ if v.startswith(prefix)]
        if could:
            problems.append(
                f"container {name} takes every variable of a "
                f"{'ConfigMap' if source.get('configMapRef') else 'Secret'} ({where}.envFrom"
                f"[{j}]{'' if not prefix else f', prefix {prefix}'}) and nothing pins "
                f"{' or '.join(could)} in it, so that source could take it past its "
                f"{watched[could[0]][1]} devices; list the variables the application needs "
                "under env instead, or give the envFrom a prefix"
            )
    return problems
