"""Where our decisions differ from HAMi v2.10's recorded answers on purpose, and why: the list
the fixture replay and the simulator's family examples both hold us to."""

from __future__ import annotations

from collections.abc import Mapping

# (fixture, pod) -> (the part of the answer that differs, why hami-py answers differently from
# HAMi v2.10 there on purpose). The rest of that step must still be HAMi's; nothing else may
# differ. The families' docs repeat these for users.
_MIXED_REASON = (
    "mixed-family-reason: HAMi fits a container's asks in Go map order (fitInDevices ranges "
    "over a map), so on a node where both families fail the reason is either family's at "
    "random (two recordings of this step gave different ones); hami-py fits NVIDIA first "
    "and gives its reason."
)

_UNTAKEN_REASON = (
    "untaken-family-annotations: HAMi gives a pod an entry for every device type of the node "
    "it lands on (allocateAppContainers' baseTypes) and writes each type's allocation "
    "annotations, so a pod taking no MetaX GPU on a node with some gets "
    "`hami.io/metax-gpu-devices-allocated: ;` (and `-to-allocate`); hami-py writes only the "
    "annotations of the families the pod takes (no device plugin's Allocate runs for a "
    "container asking none of its resources). The node chosen and its score are HAMi's."
)

DELIBERATE_DIFFERENCES: Mapping[tuple[str, str], tuple[str, str]] = {
    ("nvidia_mixed", "p2"): (
        "annotations",
        "gpu-less-entries (tests/reference/hami_v210.py) for every family: HAMi leaves the "
        "container without cards of a family out of that family's allocation text (NVIDIA's "
        "`GPU...:;` and the DCU's `DCU...:;` for a pod with one of each per container); "
        "hami-py writes an empty entry for it, the form the device plugins map by position.",
    ),
    ("nvidia_mixed", "p5"): ("failed_nodes", _MIXED_REASON),
    **{
        ("nvidia_metax", pod): ("annotations", _UNTAKEN_REASON) for pod in ("p2", "p6", "p7", "p11")
    },
    ("nvidia_mixed", "p6"): ("failed_nodes", _MIXED_REASON),
    ("nvidia_mixed", "p11"): ("failed_nodes", _MIXED_REASON),
}
