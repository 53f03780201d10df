"""Reading the cluster's objects into what the engine needs: registered cards, pod allocations.

A node's registration is each configured member's, in the members' order: the member offering
OwnInventory (NVIDIA's, hami.engine.families.nvidia.registration) reads the node's own cards
and whether it is schedulable; every other member's decode_node its cards, from its
registration or the node's capacity. A node is registered when any member is (HAMi schedules
a node with only, say, DCUs). The rest of a Node or Pod object is not kept.
"""

import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from hami.engine import names, nvidianames
from hami.engine.codec import CodecError, decode_pod_devices
from hami.engine.families.base import NodeFacts
from hami.engine.families.registry import Families
from hami.engine.holders import holder_annotations
from hami.engine.migalloc import MigAllocation, decode_allocations
from hami.engine.model import (
    ContainerDevice,
    DeviceInfo,
    NodeInventory,
    PodDevices,
    Unregistered,
)


def inventory_key(
    node: Mapping[str, Any],
    gpu_resource: str = nvidianames.GPU,
    gfd_split: int = 0,
    *,
    families: Families,
) -> tuple[Any, ...]:
    """Everything of a Node that node_inventory reads: equal keys give equal inventories.

    Most Node updates are HAMi's lock coming and going, which changes none of it, and
    decoding the registration for each one costs more than the update itself.
    """
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    owner = families.inventory_owner
    return (
        meta.get("name"),
        () if owner is None else owner.inventory_key(node, gpu_resource, gfd_split),
        _family_key(node, annotations, families),
    )


def node_inventory(
    node: Mapping[str, Any],
    gpu_resource: str = nvidianames.GPU,
    gfd_split: int = 0,
    *,
    families: Families,
) -> NodeInventory | Unregistered:
    """The node's cards: each member's of `families` registered on it, those of the member
    offering OwnInventory as the node's own. A node is registered when any member is."""
    name = str((node.get("metadata") or {}).get("name", ""))
    owner = families.inventory_owner
    owned = (
        Unregistered(name, "no configured device family owns the node's cards")
        if owner is None
        else owner.inventory(node, gpu_resource, gfd_split)
    )
    found, why = family_cards(node, families)
    if not found:
        if isinstance(owned, Unregistered) and why:
            return Unregistered(name, "; ".join([owned.why, *why]))
        return owned
    annotations = _scored((node.get("metadata") or {}).get("annotations") or {}, families)
    if isinstance(owned, Unregistered):
        return NodeInventory(name, (), handshake=True, families=found, annotations=annotations)
    return replace(owned, families=found, annotations=annotations)


def _family_key(
    node: Mapping[str, Any], annotations: Mapping[str, str], families: Families
) -> tuple[Any, ...]:
    """What the families' decode_node may read: their registrations, and where a family
    derives its cards from them, the node's capacity and labels."""
    carded = families.carded
    if not carded:
        return ()
    status = node.get("status") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    return (
        tuple(annotations.get(f.wire.register_annotation) for f in carded),
        tuple(sorted((status.get("capacity") or {}).items())),
        tuple(sorted(labels.items())),
        _scored(annotations, families),
    )


def _scored(annotations: Mapping[str, str], families: Families) -> tuple[tuple[str, str], ...]:
    """The node's annotations some family's node score reads (FamilyWire.node_reads)."""
    keys = {k for f in families.members for k in f.wire.node_reads}
    return tuple(sorted((k, v) for k, v in annotations.items() if k in keys)) if keys else ()


def family_cards(
    node: Mapping[str, Any], families: Families
) -> tuple[tuple[tuple[str, tuple[DeviceInfo, ...]], ...], list[str]]:
    """Each member of Families.carded registered on the node with its cards (what its
    decode_node finds, from the registration or the node's capacity), and why each that wrote
    a registration is not registered (no card in it, or one it cannot read)."""
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    facts = NodeFacts(
        str(meta.get("name", "")),
        (node.get("status") or {}).get("capacity") or {},
        meta.get("labels") or {},
    )
    found: list[tuple[str, tuple[DeviceInfo, ...]]] = []
    why: list[str] = []
    for family in families.carded:
        wire = family.wire
        try:
            cards = family.decode_node(annotations, facts)
        except CodecError as e:
            why.append(f"{wire.register_annotation}: {e}")
            continue
        if cards is None:
            continue
        if not cards:
            why.append(f"{wire.register_annotation}: no {wire.type} device found on node")
            continue
        unfit = next((c.id for c in cards if _ALLOCATION_SEPARATORS & set(c.id)), None)
        if unfit is not None:
            # An allocation names devices as `id,type,MiB,cores:` per container `;`: an id
            # holding one of those would be read back as another device, its usage lost.
            why.append(
                f"{wire.register_annotation}: device id {unfit!r} holds one of "
                f"{''.join(sorted(_ALLOCATION_SEPARATORS))!r}, which HAMi's allocation "
                "annotations use between devices"
            )
            continue
        found.append((wire.type, cards))
    return tuple(found), why


_ALLOCATION_SEPARATORS = frozenset(",:;")


@dataclass(frozen=True, slots=True)
class PodAllocation:
    """The slim record of a pod that holds (or is about to hold) GPU shares."""

    uid: str
    namespace: str
    name: str
    node: str  # from hami.io/vgpu-node: filter's choice, set before the Binding
    devices: PodDevices
    n_init: int
    init_done: bool
    bound: bool  # spec.nodeName is set
    # hami.io/vgpu-mig-allocations; those that match an entry of `devices` are on it as well.
    mig: tuple[MigAllocation, ...] = ()
    # The other device families' cards, from each family's allocated annotation: one entry per
    # container, init first (every family's devices of a container together); () for none.
    family_devices: PodDevices = ()
    # The pod's annotations the families of those cards read of their holders
    # (hami.engine.holders); () for a pod holding no card of such a family.
    holder_annotations: tuple[tuple[str, str], ...] = ()

    def all_devices(self) -> PodDevices:
        """Per container, NVIDIA's cards and then the other families'."""
        return merge_devices(self.devices, self.family_devices)


def merge_devices(first: PodDevices, second: PodDevices) -> PodDevices:
    """Two per-container allocations as one (the shorter padded with empty entries)."""
    if not second:
        return first
    if not first:
        return second
    n = max(len(first), len(second))
    pad: PodDevices = ((),) * n
    return tuple(a + b for a, b in zip((*first, *pad)[:n], (*second, *pad)[:n], strict=True))


def split_devices(
    devices: PodDevices, families: Families
) -> tuple[PodDevices, dict[str, PodDevices]]:
    """NVIDIA's part of a per-container allocation, and each other family's (by type), each
    with one entry per container; `devices` itself when it holds no other family's card."""
    types = families.other_types()
    kinds = {family_of(d, types) for c in devices for d in c} - {""}
    if not kinds:
        return devices, {}
    nvidia = tuple(tuple(d for d in c if not family_of(d, types)) for c in devices)
    return nvidia, {
        k: tuple(tuple(d for d in c if family_of(d, types) == k) for c in devices) for k in kinds
    }


def family_of(device: ContainerDevice, types: frozenset[str]) -> str:
    """The family a device belongs to ("" for NVIDIA): the one that chose it or whose
    annotation it was read from, else the family its type names."""
    if device.family:
        return device.family
    return device.type if device.type in types else ""


def family_allocation(
    annotations: Mapping[str, str], spec: Mapping[str, Any], families: Families
) -> PodDevices:
    """Each family's allocated annotation, per container (init first), all families merged.

    Written by us, an annotation has one entry per container; HAMi's scheduler writes only
    the entries of the containers given cards, which go, in order, to the containers that
    name the family's count resource."""
    if families.other_allocated_annotations.isdisjoint(annotations):
        return ()
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    out: PodDevices = ()
    for family in families.others:
        raw = annotations.get(family.wire.allocated_annotation)
        if not raw:
            continue
        kind = family.wire.type
        devices = tuple(tuple(replace(d, family=kind) for d in c) for c in decode_pod_devices(raw))
        if len(devices) != len(containers):
            given = iter(d for d in devices if d)
            devices = tuple(
                next(given, ()) if _names(c, family.wire.resources.count) else ()
                for c in containers
            )
        out = merge_devices(out, devices)
    return out


def _names(container: Mapping[str, Any], resource: str) -> bool:
    resources = container.get("resources") or {}
    return any(resource in (resources.get(s) or {}) for s in ("limits", "requests"))


def init_done(pod: Mapping[str, Any], n_init: int) -> bool:
    """Whether every init container has finished well (then only the app containers count)."""
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    if n_init == 0 or len(statuses) < n_init:
        return False
    return all(
        ((s.get("state") or {}).get("terminated") or {}).get("exitCode") == 0 for s in statuses
    )


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pod_allocation(pod: Mapping[str, Any], families: Families) -> PodAllocation | None:
    """The pod's GPU allocation, or None when it holds none (no annotation, or it finished)."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    node = annotations.get(names.ASSIGNED_NODE)
    if not node or is_terminal(pod):
        return None
    try:
        devices = decode_pod_devices(annotations.get(nvidianames.DEVICES_ALLOCATED, ""))
    except CodecError:
        return None
    try:
        mig = decode_allocations(annotations.get(nvidianames.MIG_ALLOCATIONS) or "")
    except CodecError:
        mig = ()  # as HAMi: none at all, so the MIG cards it holds are no longer trusted
    spec = pod.get("spec") or {}
    try:
        family_devices = family_allocation(annotations, spec, families)
    except CodecError:
        family_devices = ()  # as HAMi: an entry it cannot decode holds nothing
    n_init = len(spec.get("initContainers") or ())
    return PodAllocation(
        uid=str(meta.get("uid", "")),
        # Shared by many pods: one copy each instead of one per cached pod.
        namespace=sys.intern(str(meta.get("namespace", ""))),
        name=str(meta.get("name", "")),
        node=sys.intern(str(node)),
        devices=with_instances(devices, mig),
        n_init=n_init,
        init_done=init_done(pod, n_init),
        bound=bool(spec.get("nodeName")),
        mig=mig,
        family_devices=family_devices,
        holder_annotations=(
            holder_annotations(annotations, family_devices, families) if family_devices else ()
        ),
    )


def placement_of(alloc: PodAllocation) -> tuple[object, ...]:
    """What a bind decided: the node, and per container the cards with their shares and MIG
    placements, without what the device plugin records later (the MIG instances' identity)."""
    return (
        alloc.node,
        tuple(
            tuple(
                (d.uuid, d.usedmem, d.usedcores, d.mig and (d.mig.profile, d.mig.placement))
                for d in container
            )
            for container in alloc.all_devices()
        ),
    )


def with_instances(devices: PodDevices, mig: tuple[MigAllocation, ...]) -> PodDevices:
    """The allocation with each MIG entry on the card it names (by container and position)."""
    if not mig:
        return devices
    at = {(m.container, m.device, m.gpu): m.instance for m in mig}
    return tuple(
        tuple(replace(d, mig=at.get((c, i, d.uuid), d.mig)) for i, d in enumerate(container))
        for c, container in enumerate(devices)
    )
