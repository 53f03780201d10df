"""What each vendor's device plugin writes on a node, for the e2e node simulator and the
tests: per family (keyed by its FamilyWire.type) the node annotations of one node with a
few cards, and the node's allocatable extended resources. Families whose cards HAMi derives
from the node's resources (no card list) register with an empty annotation map; their
capacity is the allocatable given here."""

from collections.abc import Mapping

SAMPLE_NODE: dict[str, Mapping[str, str]] = {}
SAMPLE_ALLOCATABLE: dict[str, Mapping[str, str]] = {}
# Node labels a family reads, where it reads any (absent: none needed).
SAMPLE_LABELS: dict[str, Mapping[str, str]] = {}

# Biren: hami.io/node-biren-register, a JSON card list; the handshake the plugin keeps fresh.
SAMPLE_NODE["Biren"] = {
    "hami.io/node-biren-register": (
        '[{"id":"br-0","index":0,"count":4,"devmem":65536,"type":"Biren","health":true},'
        '{"id":"br-1","index":1,"count":4,"devmem":65536,"type":"Biren","health":true}]'
    ),
    "hami.io/node-handshake-biren": "Reported 2026-01-01 00:00:00",
}
SAMPLE_ALLOCATABLE["Biren"] = {"birentech.com/gpu": "8"}

# Vastai: hami.io/node-va-register, a JSON list of dies (two per physical card, `AIC`).
SAMPLE_NODE["Vastai"] = {
    "hami.io/node-va-register": "["
    + ",".join(
        f'{{"id":"va-die-{i}","index":{i},"count":1,"devmem":16384,"type":"Vastai",'
        f'"health":true,"custominfo":{{"DeviceStrategy":"die","AIC":"{i // 2}"}}}}'
        for i in range(4)
    )
    + "]",
    "hami.io/node-handshake-va": "Reported 2026-01-01 00:00:00",
}
SAMPLE_ALLOCATABLE["Vastai"] = {"vastaitech.com/va": "4"}

# AMD: hami.io/node-amd-register, a JSON card list (no handshake; health is the capacity).
SAMPLE_NODE["AMD"] = {
    "hami.io/node-amd-register": (
        '[{"id":"amd-gpu-0","index":0,"count":4,"devmem":196608,"devcore":304,'
        '"type":"AMD-Instinct-MI300X","health":true},'
        '{"id":"amd-gpu-1","index":1,"count":4,"devmem":196608,"devcore":304,'
        '"type":"AMD-Instinct-MI300X","numa":1,"health":true}]'
    ),
}
SAMPLE_ALLOCATABLE["AMD"] = {"amd.com/gpu": "2"}

# Iluvatar, one family per chip (here MR-V100): hami.io/node-MR-V100-register in the
# `:`-separated form (id,count,MiB,cores,type,numa,health[,index,mode]).
SAMPLE_NODE["MR-V100"] = {
    "hami.io/node-MR-V100-register": (
        "GPU-ilu-0,10,32768,100,MR-V100,0,true,0,hami-core:"
        "GPU-ilu-1,10,32768,100,MR-V100,0,true,1,hami-core:"
    ),
    "hami.io/node-handshake-MR-V100": "Reported 2026-01-01 00:00:00",
}
SAMPLE_ALLOCATABLE["MR-V100"] = {"iluvatar.ai/MR-V100-vgpu": "20"}

# Cambricon: no card list; HAMi derives one card per 100 vcore of the node's capacity and
# shares the vmemory (units of 256 MiB) among them: four 24 GiB MLUs.
SAMPLE_NODE["MLU"] = {}
SAMPLE_ALLOCATABLE["MLU"] = {
    "cambricon.com/vmlu": "400",  # the plugin's virtual count; HAMi does not read it
    "cambricon.com/mlu.smlu.vcore": "400",
    "cambricon.com/mlu.smlu.vmemory": "384",
}

# Moore Threads: no card list; HAMi derives one card per 16 sgpu-core of the node's
# capacity and shares the sgpu-memory (units of 512 MiB) among them: two 48 GiB cards.
SAMPLE_NODE["Mthreads"] = {}
SAMPLE_ALLOCATABLE["Mthreads"] = {
    "mthreads.com/vgpu": "200",  # the plugin's virtual count; HAMi does not read it
    "mthreads.com/sgpu-core": "32",
    "mthreads.com/sgpu-memory": "192",
}

# AWS Neuron: no card list; HAMi derives the devices from the node's capacity of devices
# and NeuronCores (a trn1.32xlarge: 16 devices of 2 cores) and reads the node's
# node.kubernetes.io/instance-type label (runs of devices are aligned off Inferentia).
SAMPLE_NODE["AWSNeuron"] = {}
SAMPLE_ALLOCATABLE["AWSNeuron"] = {"aws.amazon.com/neuron": "16", "aws.amazon.com/neuroncore": "32"}
SAMPLE_LABELS["AWSNeuron"] = {"node.kubernetes.io/instance-type": "trn1.32xlarge"}

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
