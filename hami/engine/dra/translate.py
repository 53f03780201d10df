"""The webhook's DRA mode: a pod's HAMi requests moved into ResourceClaims (docs/dra.md).

`to_dra` takes the pod as admission stores it (every check passed) and returns it with each
card-asking container's family resources moved out: recorded in `hami.io/dra-requests`, replaced
by a claim entry, the pod held by a scheduling gate until the placer has created its claims.
`restore` undoes exactly that, so a pod that arrives with the record (the webhook called
again, or a user who wrote it) is judged as if the resources were written in its containers.
"""

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from hami.engine.dra.claimspec import NO_UNITS, DeviceAsk, pinned_spec, selectors
from hami.engine.dra.config import DraConfig
from hami.engine.families.registry import Families
from hami.engine.jsonpatch import copy_json
from hami.engine.model import PodDevices
from hami.engine.nvidianames import NVIDIA
from hami.engine.requests import ResourceDefaults, container_request

GATE = "hami.io/dra-placement"
REQUESTS = "hami.io/dra-requests"
WORLD = "hami.io/device-world"
WORLDS = ("dra", "device-plugin")
NAME_MAX = 63
SECTIONS = ("limits", "requests")


class TranslateError(ValueError):
    """A pod the DRA mode cannot translate; the message names the fix."""


def short(name: str) -> str:
    """`name`, or when longer than 63 characters its start and a hash of the whole."""
    if len(name) <= NAME_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: NAME_MAX - len(digest) - 1]}-{digest}"


def entry_name(container: str) -> str:
    return short(f"hami-{container}")


def claim_base(pod: Mapping[str, Any], uid: str) -> str:
    """What the pod's claim names start with: its name, or (generateName) that prefix and the
    admission request's uid."""
    meta = pod.get("metadata") or {}
    if meta.get("name"):
        return str(meta["name"])
    return f"{meta.get('generateName') or 'pod-'}{uid[:8]}"


def claim_name(base: str, container: str) -> str:
    return short(f"{base}-{container}")


def _containers(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]


def container_asks(
    container: Mapping[str, Any],
    annotations: Mapping[str, str],
    cfg: DraConfig,
    defaults: ResourceDefaults,
    families: Families,
) -> tuple[tuple[str, ...], tuple[DeviceAsk, ...]]:
    """The families `container` asks that have no DeviceClass, and its asks of those that do.

    Raises RequestError for a value admission would refuse, SelectorError for an annotation."""
    no_class: list[str] = []
    asks: list[DeviceAsk] = []
    wires = families.by_type()
    found: list[tuple[str, int, int, int, int]] = []
    nvidia = container_request(container, defaults, strict=True)
    if nvidia is not None:
        found.append((NVIDIA, nvidia.nums, nvidia.memreq, nvidia.mem_percentage, nvidia.coresreq))
    for family in families.others:
        ask = family.container_request(container, strict=True)
        if ask is not None:
            found.append((ask.type, ask.nums, ask.memreq, ask.mem_percentage, ask.coresreq))
    for family_type, nums, mem, pct, cores in found:
        dra = cfg.for_family(family_type)
        if dra is None:
            no_class.append(family_type)
            continue
        chosen = selectors(dra, wires[family_type].wire, annotations)
        units = wires[family_type].wire.dra_core_units
        asks.append(DeviceAsk(dra, nums, mem, pct, cores, chosen, units))
    return tuple(no_class), tuple(asks)


def _moves(annotations: Mapping[str, str], cfg: DraConfig) -> bool | None:
    """Whether the pod's annotation or the mode sends it to DRA (None: the mode's choice)."""
    world = annotations.get(WORLD)
    if world is not None and world not in WORLDS:
        raise TranslateError(
            f"annotation {WORLD} is {world!r}: valid are {', '.join(WORLDS)} (or leave it out)"
        )
    if world is None:
        return None if cfg.mode == "all" else False
    return world == "dra"


def to_dra(
    pod: Mapping[str, Any],
    cfg: DraConfig,
    defaults: ResourceDefaults,
    families: Families,
    base: str,
) -> dict[str, Any] | None:
    """The pod moved to DRA, or None where it stays on the device plugins' path (DRA mode off,
    the pod's world, or a family it asks that has no DeviceClass).

    Raises TranslateError, or RequestError / SelectorError as container_asks does."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if not cfg.on:
        return None
    chosen = _moves(annotations, cfg)
    if chosen is False:
        return None
    out = copy_json(dict(pod))
    spec = out["spec"]
    moved: dict[str, dict[str, dict[str, Any]]] = {}
    names = {*defaults.names.all(), *families.other_resource_names()}
    for container in _containers(spec):
        no_class, asks = container_asks(container, annotations, cfg, defaults, families)
        if no_class:
            if chosen:
                raise TranslateError(
                    f"container {container.get('name')} asks {', '.join(no_class)} devices, "
                    f"which have no DeviceClass in --dra-device-classes: drop annotation {WORLD}"
                    " or have an administrator name the family's DeviceClass"
                )
            return None  # the whole pod stays with the device plugins
        if asks:
            name = str(container["name"])
            moved[name] = _move(container, names)
            entries = spec.setdefault("resourceClaims", [])
            if not any(e.get("name") == entry_name(name) for e in entries):
                entries.append(
                    {"name": entry_name(name), "resourceClaimName": claim_name(base, name)}
                )
    if not moved:
        return None
    meta = out.setdefault("metadata", {})
    meta.setdefault("annotations", {})[REQUESTS] = json.dumps(moved, sort_keys=True)
    gates = spec.setdefault("schedulingGates", [])
    if not any(g.get("name") == GATE for g in gates):
        gates.append({"name": GATE})
    return out


def _move(container: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """Take the family resources out of `container` into a claim entry; what was taken."""
    taken: dict[str, dict[str, Any]] = {}
    resources = container.setdefault("resources", {})
    for section in SECTIONS:
        values = resources.get(section) or {}
        for name in sorted(set(values) & names):
            taken.setdefault(section, {})[name] = values.pop(name)
        if section in resources and not values:
            del resources[section]
    entry = entry_name(str(container["name"]))
    claims = resources.setdefault("claims", [])
    if not any(c.get("name") == entry for c in claims):
        claims.append({"name": entry})
    return taken


def recorded(pod: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]] | None:
    """What `hami.io/dra-requests` says was moved out of each container; None when absent."""
    meta = pod.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(REQUESTS)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        value = None
    if not isinstance(value, dict) or not all(
        isinstance(sections, dict)
        and set(sections) <= set(SECTIONS)
        and all(isinstance(v, dict) for v in sections.values())
        for sections in value.values()
    ):
        raise TranslateError(
            f"annotation {REQUESTS} is not what the webhook writes "
            '({"<container>": {"limits": {"<resource>": "<value>"}}}): remove it and write '
            "the resources in the containers"
        )
    return value


def restore(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod with what to_dra moved put back (a copy); the pod itself when it carries no
    record. Raises TranslateError for a record that does not fit the pod."""
    moved = recorded(pod)
    if moved is None:
        return dict(pod)
    out = copy_json(dict(pod))
    spec = out.get("spec") or {}
    by_name = {str(c.get("name")): c for c in _containers(spec)}
    for name, sections in moved.items():
        container = by_name.get(name)
        if container is None:
            raise TranslateError(
                f"annotation {REQUESTS} names container {name}, which the pod lacks"
            )
        resources = container.setdefault("resources", {})
        for section, values in sections.items():
            mine = resources.setdefault(section, {})
            if set(mine) & set(values):
                raise TranslateError(
                    f"container {name} has {', '.join(sorted(set(mine) & set(values)))} both in "
                    f"its resources and in annotation {REQUESTS}: remove the annotation"
                )
            mine.update(values)
        entry = entry_name(name)
        kept = [c for c in resources.get("claims") or () if c.get("name") != entry]
        if kept:
            resources["claims"] = kept
        else:
            resources.pop("claims", None)
    entries = {entry_name(name) for name in moved}
    kept_entries = [e for e in spec.get("resourceClaims") or () if e.get("name") not in entries]
    if kept_entries:
        spec["resourceClaims"] = kept_entries
    else:
        spec.pop("resourceClaims", None)
    gates = [g for g in spec.get("schedulingGates") or () if g.get("name") != GATE]
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)
    del out["metadata"]["annotations"][REQUESTS]
    return out


def claim_object(pod: Mapping[str, Any], container: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The ResourceClaim a stored DRA pod's `container` names, with `spec`, owned by the pod (so
    it goes with it)."""
    meta = pod.get("metadata") or {}
    entry = entry_name(container)
    names = [e for e in (pod.get("spec") or {}).get("resourceClaims") or () if e["name"] == entry]
    if not names:
        raise TranslateError(f"pod {meta.get('name')} has no claim entry for container {container}")
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": meta["name"],
        "uid": meta["uid"],
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": names[0]["resourceClaimName"],
            "namespace": meta.get("namespace"),
            "ownerReferences": [owner],
        },
        "spec": dict(spec),
    }


def pinned_claims(
    pod: Mapping[str, Any],
    devices: PodDevices,
    cfg: DraConfig,
    defaults: ResourceDefaults,
    families: Families,
    units: Mapping[str, int] = NO_UNITS,
) -> list[dict[str, Any]]:
    """The claims the placer makes for the stored DRA pod `pod` once the engine has chosen
    `devices` (per container of its restored form, init containers first): one per container
    that asks cards, pinned to them and owned by the pod; `units` are the compute units of the
    chosen cards whose driver counts cores in them (DraBook.compute_units).

    Raises TranslateError, RequestError or SelectorError for a pod that cannot be placed,
    UnpublishedCardError for a chosen card whose units are not known (now)."""
    written = restore(pod)
    spec = written.get("spec") or {}
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    annotations = (written.get("metadata") or {}).get("annotations") or {}
    claims = []
    for container, chosen in zip(containers, devices, strict=True):
        _, asks = container_asks(container, annotations, cfg, defaults, families)
        if asks:
            claims.append(
                claim_object(pod, str(container["name"]), pinned_spec(asks, chosen, units))
            )
    return claims
