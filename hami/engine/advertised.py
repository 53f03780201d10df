"""The kubelet's count beside the scheduler's: the kubelet admits a node's pods only up to the
`nvidia.com/gpu` its device plugin advertises, one per card slot a container takes. HAMi's
plugin advertises every card's split count, so the two agree; a node registered from GPU
Feature Discovery labels (Lab 12) is served by its own plugin, which may advertise one per
card, and then the kubelet refuses the pods past that count (UnexpectedAdmissionError)."""

from hami.engine import nvidianames as nv
from hami.engine.model import NodeState


def shortfall(node: NodeState, advertised: int, resource: str = nv.GPU) -> str | None:
    """Why the kubelet of `node` will refuse some of the pods placed on it, or None."""
    need = sum(card.usage.used for card in node.cards)
    if advertised <= 0 or need <= advertised:
        return None
    return (
        f"node {node.name} advertises {advertised} {resource} but its pods take {need} card "
        f"slots: its kubelet admits pods only up to {advertised} and refuses the others "
        "(UnexpectedAdmissionError); let its device plugin advertise a slot per share (on GKE, "
        "GPU time-sharing with max-shared-clients-per-gpu at least the split count)"
    )
