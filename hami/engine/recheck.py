"""/bind's re-check of what /filter chose: each card given to the pod, asked again by its
family's room rule (Family.room, the rule that family's fit placed by) with what the cache
counts now, the pod's own reservation included.

As the fit and the re-check ask one rule, /bind accepts what /filter chose unless what the
card holds changed in between: an allocation that arrived since (a previous leader's last
bind), a pod bound outside the scheduler, or the card registered anew.
"""

from hami.engine.families.registry import Families
from hami.engine.model import ContainerDevice, NodeState, PodDevices
from hami.engine.nvidianames import NVIDIA


def overfull(state: NodeState, devices: PodDevices, families: Families) -> list[str]:
    """`<card> (<why>)` for each card of the node that `devices` name and that holds more than
    its family's fit lets it hold; [] when each holds no more."""
    shares: dict[str, list[ContainerDevice]] = {}
    for container in devices:
        for d in container:
            shares.setdefault(d.uuid, []).append(d)
    by_type = families.by_type()
    out = []
    for kind, cards in ((NVIDIA, state.cards), *state.families.items()):
        for card in cards:
            share = shares.get(card.info.id)
            why = None if share is None else by_type[kind].room(card, tuple(share))
            if why is not None:
                out.append(f"{card.info.id} ({why})")
    return out
