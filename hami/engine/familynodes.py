"""Reading the other device families' registrations of a Node (hami.engine.inventory's
part for every family but NVIDIA): which of them registered cards, and what of the Node
their decoding and node scores read.
"""

from collections.abc import Mapping
from typing import Any

from hami.engine.codec import CodecError
from hami.engine.families.base import NodeFacts
from hami.engine.families.registry import Families
from hami.engine.model import DeviceInfo


def family_key(
    node: Mapping[str, Any], annotations: Mapping[str, str], families: Families
) -> tuple[Any, ...]:
    """What the families' decode_node may read: their registrations, and where a family
    derives its cards from them, the node's capacity and labels."""
    if not families.others:
        return ()
    status = node.get("status") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    return (
        tuple(annotations.get(f.wire.register_annotation) for f in families.others),
        tuple(sorted((status.get("capacity") or {}).items())),
        tuple(sorted(labels.items())),
        scored(annotations, families),
    )


def scored(annotations: Mapping[str, str], families: Families) -> tuple[tuple[str, str], ...]:
    """The node's annotations some family's node score reads (FamilyWire.node_reads)."""
    keys = {k for f in families.others for k in f.wire.node_reads}
    return tuple(sorted((k, v) for k, v in annotations.items() if k in keys)) if keys else ()


def family_cards(
    node: Mapping[str, Any], families: Families
) -> tuple[tuple[tuple[str, tuple[DeviceInfo, ...]], ...], list[str]]:
    """Each family registered on the node with its cards (what its decode_node finds, from
    the registration or the node's capacity), and why each family that wrote a registration
    is not registered (no card in it, or one it cannot read)."""
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    facts = NodeFacts(
        str(meta.get("name", "")),
        (node.get("status") or {}).get("capacity") or {},
        meta.get("labels") or {},
    )
    found: list[tuple[str, tuple[DeviceInfo, ...]]] = []
    why: list[str] = []
    for family in families.others:
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
