"""Reading the cluster's objects into what the engine needs: registered cards, pod allocations.

A node counts as registered when HAMi's device plugin has published its cards
(`hami.io/node-nvidia-register`) and the kubelet advertises `nvidia.com/gpu`,
whatever `hami.io/node-handshake` says: HAMi v2.10 rewrites a handshake that is not
`Requesting_…` (the `Deleted_…` schedulers up to v2.7 left behind included) and
registers the node, and keeps a node whose kubelet advertises cards however old its
`Requesting_…` is (tests/reference/hami_v210_register.py). With GFD registration
switched on (`gfd_split` > 0), a node without HAMi's annotation is registered from
its GPU Feature Discovery labels instead (hami.engine.gfd); no device plugin takes
part in its binds. The rest of a Node or Pod object is not kept.
"""

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hami.engine import gfd, names, nvidianames
from hami.engine.codec import (
    CodecError,
    decode_link_scores,
    decode_pod_devices,
    split_list,
)
from hami.engine.families.nvidia.family import FAMILY as NVIDIA
from hami.engine.families.registry import Families
from hami.engine.familynodes import family_cards, family_key, scored
from hami.engine.holders import holder_annotations
from hami.engine.migalloc import MigAllocation, decode_allocations
from hami.engine.model import ContainerDevice, DeviceInfo, PodDevices, is_nvidia
from hami.engine.quantity import QuantityError, as_int64


@dataclass(frozen=True, slots=True)
class NodeInventory:
    name: str
    devices: tuple[DeviceInfo, ...]  # NVIDIA cards only, registration order
    cordoned: frozenset[str] = frozenset()
    links: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # True when HAMi's device plugin registered the node: its Allocate finds the pod through
    # the node lock and reports the bind phase. False for cards read from GFD labels.
    handshake: bool = True
    # The node's allocatable nvidia.com/gpu: what its kubelet admits (hami.engine.advertised).
    advertised: int = 0
    # The other device families registered on the node: (FamilyWire.type, its cards), in
    # registry order. A node with only these is registered too, with no NVIDIA card.
    families: tuple[tuple[str, tuple[DeviceInfo, ...]], ...] = ()
    # The node's annotations the families' node scores read (FamilyWire.node_reads).
    annotations: tuple[tuple[str, str], ...] = ()

    def all_devices(self) -> tuple[DeviceInfo, ...]:
        """Every card of the node, NVIDIA's first."""
        return self.devices + tuple(d for _, cards in self.families for d in cards)


@dataclass(frozen=True, slots=True)
class Unregistered:
    name: str
    why: str


def _allocatable(node: Mapping[str, Any], gpu_resource: str) -> int:
    allocatable = ((node.get("status") or {}).get("allocatable") or {}).get(gpu_resource)
    try:
        return max(as_int64(allocatable) or 0, 0) if allocatable is not None else 0
    except QuantityError:
        return 0


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
    registered = annotations.get(nvidianames.NODE_REGISTER)
    labels = meta.get("labels") or {}
    return (
        meta.get("name"),
        registered,
        annotations.get(nvidianames.NODE_LINK_SCORES),
        annotations.get(names.DEVICE_CORDON),
        ((node.get("status") or {}).get("allocatable") or {}).get(gpu_resource),
        tuple(sorted(labels.items())) if gfd_split > 0 and not registered else (),
        family_key(node, annotations, families),
    )


def node_inventory(
    node: Mapping[str, Any],
    gpu_resource: str = nvidianames.GPU,
    gfd_split: int = 0,
    *,
    families: Families,
) -> NodeInventory | Unregistered:
    """The node's cards: NVIDIA's, and those of each family of `families` registered on it.
    A node is registered when either is (HAMi schedules a node with only, say, DCUs)."""
    nvidia = _nvidia_inventory(node, gpu_resource, gfd_split)
    if not families.others:
        return nvidia
    found, why = family_cards(node, families)
    if not found:
        if isinstance(nvidia, Unregistered) and why:
            return Unregistered(nvidia.name, "; ".join([nvidia.why, *why]))
        return nvidia
    annotations = scored((node.get("metadata") or {}).get("annotations") or {}, families)
    if isinstance(nvidia, Unregistered):
        return NodeInventory(
            nvidia.name, (), handshake=True, families=found, annotations=annotations
        )
    return replace(nvidia, families=found, annotations=annotations)


def _nvidia_inventory(
    node: Mapping[str, Any], gpu_resource: str, gfd_split: int
) -> NodeInventory | Unregistered:
    meta = node.get("metadata") or {}
    name = str(meta.get("name", ""))
    annotations = meta.get("annotations") or {}
    raw = annotations.get(nvidianames.NODE_REGISTER)
    if not raw:
        if gfd_split > 0:
            return _from_gfd(name, meta, _allocatable(node, gpu_resource), gpu_resource, gfd_split)
        return Unregistered(
            name,
            f"no {nvidianames.NODE_REGISTER} annotation (is HAMi's device plugin running, and its "
            "identity in the chart's admissionPolicy.devicePluginUsers?)",
        )
    try:
        devices = tuple(d for d in NVIDIA.decode_node(annotations) or () if is_nvidia(d))
    except CodecError as e:
        return Unregistered(name, f"{nvidianames.NODE_REGISTER}: {e}")
    if not devices:
        return Unregistered(name, "no gpu found on node")
    if not _allocatable(node, gpu_resource):
        return Unregistered(name, f"node allocatable {gpu_resource} is 0")
    links: dict[str, dict[str, int]] = {}
    if annotations.get(nvidianames.NODE_LINK_SCORES):
        try:
            links = decode_link_scores(annotations[nvidianames.NODE_LINK_SCORES])
        except CodecError:
            links = {}  # topology scores are advisory: without them every link scores 0
    return NodeInventory(
        name,
        devices,
        frozenset(split_list(annotations.get(names.DEVICE_CORDON))),
        links,
        advertised=_allocatable(node, gpu_resource),
    )


def _from_gfd(
    name: str, meta: Mapping[str, Any], allocatable: int, gpu_resource: str, split: int
) -> NodeInventory | Unregistered:
    # Allocatable says the node's own device plugin runs and finds the cards healthy.
    if not allocatable:
        return Unregistered(
            name,
            f"no {nvidianames.NODE_REGISTER} annotation and node allocatable {gpu_resource} is 0 "
            "(no device plugin advertises its cards)",
        )
    cards = gfd.gfd_cards(name, meta.get("labels") or {}, allocatable, split)
    if isinstance(cards, str):
        return Unregistered(name, f"no {nvidianames.NODE_REGISTER} annotation and {cards}")
    annotations = meta.get("annotations") or {}
    cordoned = frozenset(split_list(annotations.get(names.DEVICE_CORDON)))
    return NodeInventory(name, cards, cordoned, handshake=False, advertised=allocatable)


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
