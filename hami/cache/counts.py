"""What is counted on the cards (hami.cache.store.ClusterCache owns one Counts).

It owns the pods COUNTED with an allocation of ours (and the usage each holds, as the MIG
modes of its cards stood) and, through its OutsideBook, the pods OUTSIDE the scheduler
counted as whole cards; every pod or reservation counted goes through account(), which
adds it to the sums per card (hami.cache.nodes.NodeStore) and per namespace (QuotaBook).
Which state a pod is in, and when it moves, is ClusterCache's.
"""

from collections.abc import Mapping

from hami.cache.nodes import NodeStore
from hami.cache.outside import OutsideBook
from hami.cache.quota import QuotaBook
from hami.engine.families.registry import Families
from hami.engine.familyquota import card_amounts
from hami.engine.holders import held_cards, holder_types
from hami.engine.inventory import PodAllocation, family_of
from hami.engine.model import PodDevices, Usage
from hami.engine.outside import OutsideClaim
from hami.engine.quota import card_total
from hami.engine.state import held
from hami.engine.trust import Counted


class Counts:
    """The pods counted on the cards, and the sums they add to (see the module)."""

    def __init__(
        self, nodes: NodeStore, outside: OutsideBook, quotas: QuotaBook, families: Families
    ) -> None:
        self._nodes = nodes
        self._quotas = quotas
        self._families = families
        self._family_types = families.other_types()
        self._holder_types = holder_types(families)
        self._pods: dict[str, PodAllocation] = {}  # counted as allocations of ours
        # Read-only to ClusterCache, which looks a pod up on every pod event.
        self.allocations: Mapping[str, PodAllocation] = self._pods
        self._pod_usage: dict[str, dict[str, Usage]] = {}
        self._outside = outside  # counted as the kubelet's whole cards

    def account(
        self,
        node: str,
        namespace: str,
        usage: Mapping[str, Usage],
        sign: int,
        family_cards: frozenset[str] = frozenset(),
    ) -> None:
        """Add (sign > 0) or remove one pod's usage; `family_cards` are the cards of other
        families among it, which NVIDIA's quotas do not count."""
        quoted = (
            usage if not family_cards else {k: u for k, u in usage.items() if k not in family_cards}
        )
        if sign > 0:
            self._quotas.add(namespace, card_total(quoted))
        else:
            self._quotas.remove(namespace, card_total(quoted))
        if family_cards:
            # The families' own quotas count them, by their memory and core resources.
            by_type = self._nodes.family_cards(node).items()
            owner = {c.id: kind for kind, cards in by_type for c in cards}
            amounts = {
                k: (owner[k], u.usedmem, u.usedcores) for k, u in usage.items() if k in owner
            }
            self._quotas.add_families(namespace, card_amounts(amounts, self._families), sign)
        self._nodes.count(node, usage, sign)

    def own(self, uid: str, alloc: PodAllocation, usage: dict[str, Usage], carried: bool) -> None:
        """Count the pod's allocation holding `usage`; `carried`: a reservation of the pod
        counted that very usage already."""
        self._pods[uid] = alloc
        self._pod_usage[uid] = usage
        if not carried:
            self.account(alloc.node, alloc.namespace, usage, +1, _cards(alloc.family_devices))
        # The families that read the pods holding their cards see its annotations there.
        held = held_cards(alloc.family_devices, self._holder_types)
        if held:
            self._nodes.hold(alloc.node, (uid, False), held, alloc.holder_annotations)

    def add_outside(self, claim: OutsideClaim) -> None:
        self._outside.add(claim)
        self._nodes.touch(claim.node)

    def holds(self, uid: str, counted: Counted) -> bool:
        """Whether the pod is counted so already (on cards as their MIG modes stand)."""
        if counted.outside is not None:
            return self._outside.get(uid) == counted.outside
        if counted.own is None:
            return uid not in self._pods and self._outside.get(uid) is None
        alloc = counted.own
        return self._pods.get(uid) == alloc and self._pod_usage[uid] == held(
            alloc, self._nodes.mig(alloc.node)
        )

    def uncount(self, uid: str) -> str | None:
        """Uncount what the pod holds; the node it was on, if any."""
        claim = self._outside.remove(uid)
        if claim is not None:
            self._nodes.touch(claim.node)
            return claim.node
        alloc = self._pods.pop(uid, None)
        if alloc is None:
            return None
        usage = self._pod_usage.pop(uid)
        self._nodes.unhold(alloc.node, (uid, False))
        self.account(alloc.node, alloc.namespace, usage, -1, _cards(alloc.family_devices))
        return alloc.node

    def others(self, devices: PodDevices) -> frozenset[str]:
        """The cards of other families than NVIDIA's among `devices`."""
        if not self._family_types:
            return frozenset()
        types = self._family_types
        return frozenset(d.uuid for c in devices for d in c if family_of(d, types))

    def forget_node(self, name: str) -> None:
        self._outside.forget_node(name)


def _cards(devices: PodDevices) -> frozenset[str]:
    return frozenset(d.uuid for c in devices for d in c)
