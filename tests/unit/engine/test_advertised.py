"""The kubelet's count against the card slots placed on a node (hami.engine.advertised)."""

from __future__ import annotations

import pytest

from hami.engine.advertised import shortfall
from hami.engine.model import DeviceInfo, Usage
from hami.engine.state import build_node
from tests.builders import FAMILIES

T4 = DeviceInfo("GFD-n-0", 0, 2, 15360, 100, "NVIDIA-Tesla T4")


@pytest.mark.parametrize(
    ("advertised", "used", "warned"),
    [
        (1, 1, False),  # Lab 12's first pod on a card GKE's plugin advertises once
        (1, 2, True),  # its second: the kubelet refuses it
        (2, 2, False),  # GPU time-sharing with two clients
        (0, 2, False),  # nothing advertised: the node is not registered anyway
    ],
)
def test_a_node_is_short_when_its_pods_take_more_slots_than_it_advertises(
    advertised: int, used: int, warned: bool
) -> None:
    node = build_node(
        "n", (T4,), {"GFD-n-0": Usage(used=used, usedmem=4096 * used)}, registry=FAMILIES
    )
    found = shortfall(node, advertised)
    assert (found is not None) == warned
    if found:
        assert found.startswith(f"node n advertises {advertised} nvidia.com/gpu but its pods")
