"""What each vendor's device plugin writes on a node, for the e2e node simulator and the
tests: per family (keyed by its FamilyWire.type) the node annotations of one node with a
few cards, and the node's allocatable extended resources. Families whose cards HAMi derives
from the node's resources (no card list) register with an empty annotation map; their
capacity is the allocatable given here."""

from collections.abc import Mapping

SAMPLE_NODE: dict[str, Mapping[str, str]] = {}
SAMPLE_ALLOCATABLE: dict[str, Mapping[str, str]] = {}

# Biren: hami.io/node-biren-register, a JSON card list; the handshake the plugin keeps fresh.
SAMPLE_NODE["Biren"] = {
    "hami.io/node-biren-register": (
        '[{"id":"br-0","index":0,"count":4,"devmem":65536,"type":"Biren","health":true},'
        '{"id":"br-1","index":1,"count":4,"devmem":65536,"type":"Biren","health":true}]'
    ),
    "hami.io/node-handshake-biren": "Reported_2026-01-01 00:00:00",
}
SAMPLE_ALLOCATABLE["Biren"] = {"birentech.com/gpu": "8"}

# MetaX GPU: no card list; HAMi counts the node's metax-tech.com/gpu capacity (a simulator
# sets capacity to the allocatable given here). The plugin writes MetaLink losses and scores
# per number of cards asked, read by the node score.
SAMPLE_NODE["Metax-GPU"] = {
    "metax-tech.com/gpu.topology.losses": '{"1":0,"2":0,"3":110,"4":220}',
    "metax-tech.com/gpu.topology.scores": '{"1":0,"2":10,"3":20,"4":60}',
}
SAMPLE_ALLOCATABLE["Metax-GPU"] = {"metax-tech.com/gpu": "4"}

# MetaX sGPU: metax-tech.com/node-gpu-devices, a JSON card list in Go's field names (zero
# fields omitted), with the card's QoS policy and MetaLink zone; no handshake.
SAMPLE_NODE["Metax-SGPU"] = {
    "metax-tech.com/node-gpu-devices": "["
    + ",".join(
        f'{{"uuid":"GPU-mx-{i}","bdf":"0000:{0x40 + i:02x}:00.0","model":"MXC500",'
        f'"totalDevCount":16,"totalCompute":100,"totalVRam":65536,"numa":{i // 2},'
        f'"healthy":true,"qosPolicy":"best-effort","linkZone":{1 + i // 2}}}'
        for i in range(4)
    )
    + "]",
}
SAMPLE_ALLOCATABLE["Metax-SGPU"] = {"metax-tech.com/sgpu": "64"}
