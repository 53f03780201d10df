"""The pods holding each family card, as a family's rules read them (FitPod.holders).

HAMi hands a family's Fit and ScoreNode every card's DeviceUsage.PodInfos: the pods its cache
counts on the card, one entry per pod (their devices are collapsed per card), with their whole
annotations. Only a family whose FamilyWire.holder_reads names keys reads them (MetaX's sGPU
QoS), so only the pods holding such a family's cards are kept, and only those keys of them:
the pods of every other family, NVIDIA's (which names none) among them, cost nothing here.
Each function asks every configured member of its FamilyWire.
"""

from collections.abc import Mapping

from hami.engine.families.registry import Families
from hami.engine.model import PodDevices

# (key, value) pairs of a pod's annotations, sorted: hashable and comparable, as a pod's
# allocation record is.
Pairs = tuple[tuple[str, str], ...]
# card id -> the pods holding it: (pod key, their annotations), in the order they were counted.
CardHolders = Mapping[str, tuple[tuple[str, Mapping[str, str]], ...]]


def holder_types(families: Families) -> frozenset[str]:
    """The families whose rules read the pods holding their cards."""
    return frozenset(f.wire.type for f in families.members if f.wire.holder_reads)


def held_cards(devices: PodDevices, types: frozenset[str]) -> frozenset[str]:
    """The cards of `devices` whose family reads its holders (devices carry their family)."""
    if not types:
        return frozenset()
    return frozenset(d.uuid for c in devices for d in c if d.family in types)


def holder_annotations(
    annotations: Mapping[str, str], devices: PodDevices, families: Families
) -> Pairs:
    """The pod's annotations the families of its cards read of their holders."""
    kinds = {d.family for c in devices for d in c}
    keys = {k for f in families.members if f.wire.type in kinds for k in f.wire.holder_reads}
    return tuple(sorted((k, v) for k, v in annotations.items() if k in keys))


def planned_annotations(
    annotations: Mapping[str, str], devices: PodDevices, families: Families
) -> Pairs:
    """holder_annotations for a pod decided but not yet bound, whose allocation annotations
    are still to be written: what its bind will write among them. HAMi keeps what it decided
    from its filter on (its pod cache, MetaX's JitteryQosCache), before the pod shows it."""
    kinds = {d.family for c in devices for d in c}
    written: dict[str, str] = dict(annotations)
    for family in families.members:
        kind = family.wire.type
        if kind in kinds and family.wire.holder_reads:
            own = tuple(tuple(d for d in c if d.family == kind) for c in devices)
            written.update(family.annotations(own))
    return holder_annotations(written, devices, families)


def card_holders(held: Mapping[tuple[str, bool], tuple[frozenset[str], Pairs]]) -> CardHolders:
    """Per card, the pods holding it, from each pod's (cards, annotations); a pod is keyed by
    (uid, whether it is a reservation)."""
    out: dict[str, list[tuple[str, Mapping[str, str]]]] = {}
    for (uid, _), (cards, pairs) in held.items():
        annotations = dict(pairs)
        for card in sorted(cards):
            out.setdefault(card, []).append((uid, annotations))
    return {card: tuple(pods) for card, pods in out.items()}
