"""GPU pods the scheduler did not place, counted as what the kubelet gives them.

A pod bound by another scheduler, or created with its node already named, still gets
`nvidia.com/gpu` from the node's device plugin: the kubelet hands it that many devices, with
no slice and none of HAMi-core's limits, so each is a whole card as far as anyone can tell.
So is a pod bound with an allocation that cannot be ours (one naming another node, or a card
its node does not have): the kubelet gives it what it asks for all the same.

Which cards the kubelet chose is not written anywhere the scheduler can read. The pod is
counted on the node's least used cards, as whole cards: the node's count is then right (the
next placements leave as many cards as the pod took), and a pod that arrives on a full node
shows as the over-commitment it is. The choice is a function of the node's other usage only,
never of the order events came in, so a restarted scheduler counts the same.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami.engine import nvidianames as nv
from hami.engine.model import DeviceInfo, Usage
from hami.engine.quantity import QuantityError, as_int64


@dataclass(frozen=True, slots=True)
class OutsideClaim:
    """A bound pod holding GPUs without an allocation of ours."""

    uid: str
    namespace: str
    name: str
    node: str
    cards: int  # whole cards: what the kubelet gives it
    why: str  # how it came to be outside the scheduler, for `hami explain`
    # The devices of other families its kubelet gives it: (FamilyWire.type, how many), each
    # counted as whole cards of that family the same way.
    families: tuple[tuple[str, int], ...] = ()


def _count(container: Mapping[str, Any], gpu_resource: str) -> int:
    resources = container.get("resources") or {}
    for section in ("limits", "requests"):
        value = (resources.get(section) or {}).get(gpu_resource)
        if value is not None:
            try:
                return max(as_int64(value) or 0, 0)
            except QuantityError:
                return 0
    return 0


def kubelet_gpus(spec: Mapping[str, Any], gpu_resource: str = nv.GPU) -> int:
    """How many devices the kubelet gives the pod: its effective request, as the kubelet
    computes it for any resource. Init containers run one at a time and their devices are
    reused; sidecars (init containers that restart) run beside everything after them."""
    sidecars = 0
    peak = 0
    for c in spec.get("initContainers") or ():
        n = _count(c, gpu_resource)
        peak = max(peak, sidecars + n)
        if c.get("restartPolicy") == "Always":
            sidecars += n
    app = sum(_count(c, gpu_resource) for c in spec.get("containers") or ())
    return max(peak, sidecars + app)


def whole(card: DeviceInfo) -> Usage:
    """One pod using all of a card. On a card in MIG mode it holds no instance of ours, which
    makes HAMi stop trusting the card (hami.engine.mig.untrusted)."""
    return Usage(used=1, usedmem=card.devmem, usedcores=card.devcore, bare=int(card.mig))


def attribute(
    cards: Sequence[DeviceInfo], usage: Mapping[str, Usage], claims: Iterable[OutsideClaim]
) -> dict[str, tuple[OutsideClaim, ...]]:
    """Which cards the claims are counted on: each takes `cards` distinct cards (at most the
    node's), the least used first by memory share, then slots, then the highest index."""
    counted = {c.id: usage.get(c.id, Usage()) for c in cards}
    placed: dict[str, tuple[OutsideClaim, ...]] = {}

    def load(card: DeviceInfo) -> tuple[float, int, int]:
        u = counted[card.id]
        share = u.usedmem / card.devmem if card.devmem else float(u.used)
        return share, u.used, -card.index

    for claim in sorted(claims, key=lambda c: (c.namespace, c.name, c.uid)):
        for card in sorted(cards, key=load)[: claim.cards]:
            counted[card.id] = counted[card.id] + whole(card)
            placed[card.id] = (*placed.get(card.id, ()), claim)
    return placed


def with_outside(
    cards: Sequence[DeviceInfo],
    usage: Mapping[str, Usage],
    placed: Mapping[str, tuple[OutsideClaim, ...]],
) -> dict[str, Usage]:
    """The cards' usage with the whole cards of the pods placed on them."""
    out = dict(usage)
    for card in cards:
        for _ in placed.get(card.id, ()):
            out[card.id] = out.get(card.id, Usage()) + whole(card)
    return out
