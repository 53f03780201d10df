"""The annotations and label a bind sends inside the Binding, in HAMi's format."""

from collections.abc import Mapping
from typing import Any

from hami.engine import names, nvidianames
from hami.engine.families.base import BindContext
from hami.engine.families.nvidia.family import FAMILY as NVIDIA
from hami.engine.families.registry import Families
from hami.engine.inventory import split_devices
from hami.engine.model import DeviceInfo, PodDevices


def allocation_annotations(
    node: str,
    devices: PodDevices,
    unix_now: int,
    phase: str = names.PHASE_ALLOCATING,
    *,
    families: Families,
    containers: tuple[Mapping[str, Any], ...] = (),
    cards: Mapping[str, tuple[DeviceInfo, ...]] | None = None,
    now_ns: int | None = None,
) -> dict[str, str]:
    """`phase` is `success` on a node without HAMi's device plugin: no Allocate will follow.

    NVIDIA's cards go under HAMi's NVIDIA keys, each other family's under its own (its
    Family.annotations); a pod with no NVIDIA card has no NVIDIA keys, as in HAMi."""
    devices, others = split_devices(devices, families)
    out = {
        names.ASSIGNED_NODE: node,
        names.ASSIGNED_TIME: str(unix_now),
        names.BIND_PHASE: phase,
        names.BIND_TIME: str(unix_now),
    }
    by_type = families.other_by_type()
    for kind, theirs in others.items():
        bind = BindContext(
            node,
            unix_now * 1_000_000_000 if now_ns is None else now_ns,
            containers,
            (cards or {}).get(kind, ()),
        )
        out.update(by_type[kind].annotations(theirs, bind))
    if others and not any(devices):
        return out
    out.update(NVIDIA.annotations(devices))
    return out


def written_cards(annotations: Mapping[str, str], families: Families) -> str | None:
    """The pod's allocation as written: NVIDIA's annotation, then each other family's
    prefixed with its type (`DCU <list>`); None when it carries none."""
    parts = (
        [annotations[nvidianames.DEVICES_ALLOCATED]]
        if nvidianames.DEVICES_ALLOCATED in annotations
        else []
    )
    parts += [
        f"{f.wire.type} {annotations[f.wire.allocated_annotation]}"
        for f in families.others
        if f.wire.allocated_annotation in annotations
    ]
    return " ".join(parts) or None


def allocation_labels(node: str) -> dict[str, str]:
    # HAMi labels the pod with its node too; label selectors depend on it.
    return {names.ASSIGNED_NODE: node}
