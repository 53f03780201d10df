"""The bound GPU pods counted as the kubelet's whole cards (hami.engine.outside), by pod and by
node, and the cards of each node they are counted on as its usage last stood."""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from hami.engine.model import DeviceInfo, Usage
from hami.engine.outside import OutsideClaim, attribute, with_outside


class OutsideBook:
    def __init__(self) -> None:
        self._claims: dict[str, OutsideClaim] = {}
        self._by_node: dict[str, dict[str, OutsideClaim]] = {}
        self._cards: dict[str, dict[str, tuple[OutsideClaim, ...]]] = {}

    def get(self, uid: str) -> OutsideClaim | None:
        return self._claims.get(uid)

    def add(self, claim: OutsideClaim) -> None:
        self._claims[claim.uid] = claim
        self._by_node.setdefault(claim.node, {})[claim.uid] = claim

    def remove(self, uid: str) -> OutsideClaim | None:
        claim = self._claims.pop(uid, None)
        if claim is not None:
            on_node = self._by_node[claim.node]
            del on_node[uid]
            if not on_node:
                del self._by_node[claim.node]
        return claim

    def claims(self, node: str | None = None) -> Iterable[OutsideClaim]:
        if node is not None:
            return self._by_node.get(node, {}).values()
        return self._claims.values()

    def cards(self, node: str) -> Mapping[str, tuple[OutsideClaim, ...]]:
        return self._cards.get(node, {})

    def usage(
        self,
        node: str,
        devices: Sequence[DeviceInfo],
        usage: Mapping[str, Usage],
        families: Sequence[tuple[str, Sequence[DeviceInfo]]] = (),
    ) -> Mapping[str, Usage]:
        """The node's usage with its outside pods' whole cards on top, placed afresh: NVIDIA's
        on `devices`, each other family's on that family's cards."""
        claims = self._by_node.get(node)
        if not claims:
            self._cards.pop(node, None)
            return usage
        placed = attribute(devices, usage, claims.values())
        out = with_outside(devices, usage, placed)
        for kind, cards in families:
            asking = [
                replace(c, cards=n) for c in claims.values() for k, n in c.families if k == kind
            ]
            if asking:
                theirs = attribute(cards, out, asking)
                out = with_outside(cards, out, theirs)
                placed.update(theirs)
        self._cards[node] = placed
        return out

    def forget_node(self, node: str) -> None:
        self._cards.pop(node, None)
