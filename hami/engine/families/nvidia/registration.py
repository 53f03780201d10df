"""NVIDIA's registration of a node: its cards, and whether the node is schedulable.

A node counts as registered when HAMi's device plugin has published its cards
(`hami.io/node-nvidia-register`) and the kubelet advertises `nvidia.com/gpu`,
whatever `hami.io/node-handshake` says: HAMi v2.10 rewrites a handshake that is not
`Requesting_…` (the `Deleted_…` schedulers up to v2.7 left behind included) and
registers the node, and keeps a node whose kubelet advertises cards however old its
`Requesting_…` is (tests/reference/hami_v210_register.py). With GFD registration
switched on (`gfd_split` > 0), a node without HAMi's annotation is registered from
its GPU Feature Discovery labels instead (hami.engine.gfd); no device plugin takes
part in its binds.
"""

from collections.abc import Mapping
from typing import Any

from hami.engine import gfd, names, nvidianames
from hami.engine.codec import CodecError, decode_link_scores, decode_node_devices, split_list
from hami.engine.model import NodeInventory, Unregistered, is_nvidia
from hami.engine.quantity import QuantityError, as_int64


def registration_key(node: Mapping[str, Any], gpu_resource: str, gfd_split: int) -> tuple[Any, ...]:
    """Everything of a Node that `registration` reads but its name."""
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    registered = annotations.get(nvidianames.NODE_REGISTER)
    labels = meta.get("labels") or {}
    return (
        registered,
        annotations.get(nvidianames.NODE_LINK_SCORES),
        annotations.get(names.DEVICE_CORDON),
        ((node.get("status") or {}).get("allocatable") or {}).get(gpu_resource),
        tuple(sorted(labels.items())) if gfd_split > 0 and not registered else (),
    )


def registration(
    node: Mapping[str, Any], gpu_resource: str, gfd_split: int
) -> NodeInventory | Unregistered:
    """The node's NVIDIA cards with its cordoned cards, link scores and advertised count, or
    why it is not registered."""
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
        devices = tuple(d for d in decode_node_devices(raw) if is_nvidia(d))
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


def _allocatable(node: Mapping[str, Any], gpu_resource: str) -> int:
    allocatable = ((node.get("status") or {}).get("allocatable") or {}).get(gpu_resource)
    try:
        return max(as_int64(allocatable) or 0, 0) if allocatable is not None else 0
    except QuantityError:
        return 0
