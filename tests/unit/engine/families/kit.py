"""Small builders the family tests share: cards with usage, containers, a fit step."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hami.engine.families.base import Family, FamilyFit, FamilyRequest, FitPod
from hami.engine.model import Card, DeviceInfo, PodDevices, Usage
from hami.engine.policy import CardFilter


def card(
    info: DeviceInfo, used: int = 0, usedmem: int = 0, usedcores: int = 0, healthy: bool = True
) -> Card:
    return Card(
        replace(info, health=healthy and info.health),
        Usage(used, usedmem, usedcores),
        0.0,
    )


def ctr(
    limits: Mapping[str, Any] | None = None,
    requests: Mapping[str, Any] | None = None,
    name: str = "c",
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = dict(limits)
    if requests is not None:
        resources["requests"] = dict(requests)
    return {"name": name, "resources": resources}


@dataclass(frozen=True)
class Step:
    """One fit: a container's limits (or a request as HAMi's own tests build one) on some
    cards; the devices taken (uuid, MiB, cores) or HAMi's reason text."""

    name: str
    cards: Sequence[Card]
    limits: Mapping[str, Any] | FamilyRequest
    want: tuple[tuple[str, int, int], ...] | str
    annotations: Mapping[str, str] = field(default_factory=dict)
    mutex: bool = False
    allocated: PodDevices = ()


def run(family: Family, step: Step) -> FamilyFit:
    if isinstance(step.limits, FamilyRequest):
        request: FamilyRequest | None = step.limits
    else:
        request = family.container_request(ctr(step.limits), strict=True)
    assert request is not None, step.name
    return family.fit(
        step.cards,
        request,
        FitPod(step.annotations, frozenset({CardFilter.MUTEX} if step.mutex else ())),
        step.allocated,
    )


def check(family: Family, step: Step) -> None:
    got = run(family, step)
    if isinstance(step.want, str):
        assert got.devices is None, (step.name, got)
        assert got.reason == step.want, step.name
    else:
        assert got.devices is not None, (step.name, got.reason)
        assert tuple((d.uuid, d.usedmem, d.usedcores) for d in got.devices) == step.want, step.name


# What a family reads of a container (count, MiB, memory percentage, cores); None: no ask.
Ask = tuple[int, int, int, int] | None


def asked(
    family: Family, limits: Mapping[str, Any] | None, requests: Mapping[str, Any] | None = None
) -> Ask:
    got = family.container_request(ctr(limits, requests))
    return None if got is None else (got.nums, got.memreq, got.mem_percentage, got.coresreq)


def wire_names_outside(family: Family, home: Path, root: Path) -> list[str]:
    """Where a family's wire names (resources, node and pod annotations) appear in the
    product outside its home (its module, or its package) and the registry."""
    w = family.wire
    names = [
        *w.resources.all(),
        w.register_annotation,
        w.handshake_annotation,
        w.to_allocate_annotation,
        w.allocated_annotation,
        *w.pod_annotations(),
    ]
    return [
        f"{name} appears in {path}"
        for path in root.rglob("*.py")
        if path != home and home not in path.parents and path.name != "registry.py"
        for name in filter(None, names)
        if name in path.read_text()
    ]
