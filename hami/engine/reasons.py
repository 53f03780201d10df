"""Rejection reasons, worded as HAMi v2.10 words them.

kube-scheduler copies the per-node text into its FailedScheduling event, so
these strings are part of the user interface: `4/4 ExclusiveDeviceAllocateConflict`
must read the same as under HAMi.
"""

from collections.abc import Mapping
from typing import Final

CARD_NOT_HEALTH: Final = "CardNotHealth"
CARD_CORDONED: Final = "CardCordoned"
CARD_TYPE_MISMATCH: Final = "CardTypeMismatch"
NUMA_NOT_FIT: Final = "NumaNotFit"
CARD_UUID_MISMATCH: Final = "CardUuidMismatch"
CARD_TIME_SLICING_EXHAUSTED: Final = "CardTimeSlicingExhausted"
EXCLUSIVE_CONFLICT: Final = "ExclusiveDeviceAllocateConflict"
RESOURCE_QUOTA_NOT_FIT: Final = "ResourceQuotaNotFit"
CARD_INSUFFICIENT_MEMORY: Final = "CardInsufficientMemory"
CARD_INSUFFICIENT_CORE: Final = "CardInsufficientCore"
CARD_COMPUTE_UNITS_EXHAUSTED: Final = "CardComputeUnitsExhausted"
# A MIG card where no profile covering the ask has a free placement.
CARD_MIG_TOPOLOGY_INFEASIBLE: Final = "CardMigTopologyInfeasible"
ALLOCATED_CARDS_INSUFFICIENT: Final = "AllocatedCardsInsufficientRequest"
# The pod asks for a split mode (or size) the node's cards do not offer.
MODE_NOT_FIT: Final = "ModeNotFit"
# A family's own rule refused the card (one family keeps a pod's devices on one card).
CARD_NOT_FOUND_CUSTOM_FILTER_RULE: Final = "CardNotFoundCustomFilterRule"

NODE_INSUFFICIENT_DEVICE: Final = "NodeInsufficientDevice"
NODE_UNREGISTERED: Final = "node unregistered"


def card_reasons(counts: Mapping[str, int], cards: int) -> str:
    """`<n>/<cards> <Reason>` per reason, sorted and joined with ", " (HAMi's GenReason)."""
    return ", ".join(sorted(f"{n}/{cards} {reason}" for reason, n in counts.items()))


def unschedulable_message(total_nodes: int, failed: Mapping[str, str]) -> str:
    """The sentence kube-scheduler builds from the extender's failedNodes (its FitError)."""
    histogram: dict[str, int] = {}
    for reason in failed.values():
        histogram[reason] = histogram.get(reason, 0) + 1
    parts = sorted(f"{n} {reason}" for reason, n in histogram.items())
    return f"0/{total_nodes} nodes are available: {', '.join(parts)}."
