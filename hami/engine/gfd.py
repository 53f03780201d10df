"""Cards read from GPU Feature Discovery labels, for nodes that run no HAMi device plugin.

A node as GKE's own device plugin leaves it (Lab 12, Step 2) advertises whole
cards in allocatable `nvidia.com/gpu` and carries the labels KAI Scheduler
reads: `nvidia.com/gpu.count`, `nvidia.com/gpu.memory` (MiB per card) and
`nvidia.com/gpu.product`. They are read as KAI reads them (the card count from
the label, else from allocatable; a memory value of 1 TiB or more is bytes, a
GPU Feature Discovery bug), except that the memory is kept exact: KAI floors it
to a multiple of 100 MiB, which on a 16384 MiB card costs the fourth 4096 MiB
tenant. A node without the memory label is refused with a reason, where KAI
silently assumes 100 MiB and every pod stays Pending.

Nothing on such a node knows the cards' UUIDs, so each card gets a stable
synthetic id, `GFD-<node>-<index>`: the same after every restart, unique in
the cluster (node names are), and never mistaken for an NVML UUID. Containers
are told the card by its index (`NVIDIA_VISIBLE_DEVICES=<index>`), which every
NVIDIA runtime accepts.
"""

import re
from collections.abc import Mapping

from hami.engine import nvidianames as nv
from hami.engine.model import DeviceInfo

COUNT_LABEL = "nvidia.com/gpu.count"
MEMORY_LABEL = "nvidia.com/gpu.memory"
PRODUCT_LABEL = "nvidia.com/gpu.product"

ID_PREFIX = "GFD-"
_TIB_IN_MIB = 1024 * 1024
_ID = re.compile(r"^GFD-.+-(\d+)$")


def card_id(node: str, index: int) -> str:
    return f"{ID_PREFIX}{node}-{index}"


def visible_device(uuid: str) -> str:
    """What NVIDIA_VISIBLE_DEVICES names the card by: the index of a synthetic id, else the UUID."""
    m = _ID.match(uuid)
    return m.group(1) if m else uuid


def _whole(labels: Mapping[str, str], key: str) -> int | None:
    raw = labels.get(key)
    if raw is None or not raw.isdigit():
        return None
    return int(raw)


def gfd_cards(
    node: str, labels: Mapping[str, str], allocatable: int, split: int
) -> tuple[DeviceInfo, ...] | str:
    """The node's cards, each shared by `split` tasks, or why the labels do not describe any."""
    memory = _whole(labels, MEMORY_LABEL)
    if memory is None or memory == 0:
        got = labels.get(MEMORY_LABEL)
        return (
            f"no {MEMORY_LABEL} label (MiB per card, as nvidia-smi reports it)"
            if got is None
            else f"{MEMORY_LABEL}={got!r} is not a positive whole number of MiB"
        )
    if memory >= _TIB_IN_MIB:
        memory //= 1024 * 1024
    count = _whole(labels, COUNT_LABEL) if COUNT_LABEL in labels else allocatable
    if count is None or count == 0:
        return f"{COUNT_LABEL}={labels.get(COUNT_LABEL)!r} is not a positive whole number"
    product = labels.get(PRODUCT_LABEL) or nv.NVIDIA
    # HAMi's vendor match looks for the word in the type; GFD products normally carry it.
    kind = product if "nvidia" in product.lower() else f"NVIDIA-{product}"
    return tuple(
        DeviceInfo(id=card_id(node, i), index=i, count=split, devmem=memory, devcore=100, type=kind)
        for i in range(count)
    )
