"""A card both worlds serve, held past its capacity.

kube-scheduler's DRA allocator counts the allocated claims only: the pods HAMi's device plugin
serves on the same card (one UUID registered by the plugin and published by a DRA driver) are
invisible to it, so a claim it allocates outside HAMi's placer (another scheduler's pod, a
user's own claim) may take room those pods hold. Nothing HAMi can write on Kubernetes 1.36's
defaults stops that allocation (docs/dra.md, "A card both worlds serve"); the scheduler counts
both worlds on the card, so it shows, and keeps its own pods and claims off the card, and says
what to do.
"""

from hami.engine.model import DeviceInfo, Usage

REMEDY = (
    "kube-scheduler's DRA allocator does not count HAMi's device-plugin pods; serve the card "
    "from one world (remove the DRA driver or HAMi's device plugin from the node, docs/dra.md "
    "'Moving a node pool'), or let only HAMi's DRA mode create claims on it"
)


def past_capacity(usage: Usage, card: DeviceInfo) -> str:
    """What is counted on the card beyond its memory or cores; "" when nothing is."""
    over = []
    if usage.usedmem > card.devmem:
        over.append(f"{usage.usedmem} MiB counted of {card.devmem}")
    if usage.usedcores > card.devcore:
        over.append(f"{usage.usedcores}% of its cores counted of {card.devcore}")
    return ", ".join(over)


def warning(node: str, uuid: str, over: str) -> str:
    return (
        f"card {uuid} on node {node}, served by HAMi's device plugin and a DRA driver, holds "
        f"more than it has ({over}): {REMEDY}"
    )
