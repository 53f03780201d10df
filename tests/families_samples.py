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

# Ascend 910B3: HAMi's ascend-device-plugin writes one JSON card list per chip kind under
# hami.io/node-register-<commonWord> (Go's omitempty: no index 0, no numa), each NPU's HCCS
# group as custominfo.NetworkID (0 for NPUs 0-3, 1 for 4-7), its handshake in its own time
# format, and whether the node offers the soft split (hami-vnpu-core). The kubelet sees
# `count` devices per NPU of the count resource alone.
SAMPLE_NODE["Ascend910B3"] = {
    "hami.io/node-register-Ascend910B3": (
        '[{"id":"npu-0","count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,"custominfo":{"NetworkID":0}},'
        '{"id":"npu-1","index":1,"count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,"custominfo":{"NetworkID":0}},'
        '{"id":"npu-2","index":2,"count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,"custominfo":{"NetworkID":0}},'
        '{"id":"npu-3","index":3,"count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,"custominfo":{"NetworkID":0}},'
        '{"id":"npu-4","index":4,"count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,"custominfo":{"NetworkID":1}},'
        '{"id":"npu-5","index":5,"count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,"custominfo":{"NetworkID":1}},'
        '{"id":"npu-6","index":6,"count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,"custominfo":{"NetworkID":1}},'
        '{"id":"npu-7","index":7,"count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,"custominfo":{"NetworkID":1}}]'
    ),
    "hami.io/node-handshake-Ascend910B3": "Reported_2026.01.01 00:00:00",
    "hami-vnpu-core": "false",
}
SAMPLE_ALLOCATABLE["Ascend910B3"] = {"huawei.com/Ascend910B3": "32"}

# Kunlunxin whole XPUs: the plugin registers no card list, only the count HAMi reads from
# the node's capacity (one card per unit, named after the node).
SAMPLE_NODE["kunlun"] = {}
SAMPLE_ALLOCATABLE["kunlun"] = {"kunlunxin.com/xpu": "8"}

# Kunlunxin vXPUs: HAMi's kunlun vXPU plugin writes an eight-XPU P800 board as a JSON card
# list under hami.io/node-register-xpu (split count 4 per XPU; ids without `:`, which HAMi's
# allocation format uses between devices) and
# keeps its handshake fresh. HAMi offers a request only the cards whose model contains its
# type, so the plugin's model names the XPU (as in HAMi's recorded fixtures).
SAMPLE_NODE["XPU"] = {
    "hami.io/node-register-xpu": (
        '[{"id":"XPU-0","count":4,"devmem":98304,"devcore":100,"type":"XPU-P800","health":true},'
        '{"id":"XPU-1","index":1,"count":4,"devmem":98304,"devcore":100,"type":"XPU-P800","health":true},'
        '{"id":"XPU-2","index":2,"count":4,"devmem":98304,"devcore":100,"type":"XPU-P800","health":true},'
        '{"id":"XPU-3","index":3,"count":4,"devmem":98304,"devcore":100,"type":"XPU-P800","health":true},'
        '{"id":"XPU-4","index":4,"count":4,"devmem":98304,"devcore":100,"type":"XPU-P800","numa":1,"health":true},'
        '{"id":"XPU-5","index":5,"count":4,"devmem":98304,"devcore":100,"type":"XPU-P800","numa":1,"health":true},'
        '{"id":"XPU-6","index":6,"count":4,"devmem":98304,"devcore":100,"type":"XPU-P800","numa":1,"health":true},'
        '{"id":"XPU-7","index":7,"count":4,"devmem":98304,"devcore":100,"type":"XPU-P800","numa":1,"health":true}]'
    ),
    "hami.io/node-handshake-xpu": "Reported_2026-01-01 00:00:00",
}
SAMPLE_ALLOCATABLE["XPU"] = {"kunlunxin.com/vxpu": "32", "kunlunxin.com/vxpu-memory": "786432"}

# Enflame whole GCUs: the plugin registers no card list, only the count HAMi reads from the
# node's capacity (one card per unit, named after the node).
SAMPLE_NODE["GCU"] = {}
SAMPLE_ALLOCATABLE["GCU"] = {"enflame.com/gcu": "2"}

# Enflame DRS shares: the DRS plugin writes its cards' slice capacity and the DRS profiles
# they can be cut into (`<slices>g.<GB>gb` with the profile ids) under
# enflame.com/gcu-drs-capacity; there is no handshake.
SAMPLE_NODE["Enflame"] = {
    "enflame.com/gcu-drs-capacity": (
        '{"devices":[{"index":"0","minor":"0","capacity":6},'
        '{"index":"1","minor":"1","capacity":6}],'
        '"profiles":{"1g.6gb":"0","2g.12gb":"1","3g.20gb":"2","6g.40gb":"3"}}'
    ),
}
SAMPLE_ALLOCATABLE["Enflame"] = {"enflame.com/drs-gcu": "12"}

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


def _ascend(kind: str, devmem: int, devcore: int) -> None:
    """Another chip kind of HAMi's vnpus config, registered as the 910B3 above is: eight NPUs
    of the chart's memory and AI cores (310P: its allocatable memory), two HCCS groups."""
    npus = ",".join(
        "{"
        + f'"id":"{kind.lower()}-{i}",'
        + (f'"index":{i},' if i else "")
        + f'"count":4,"devmem":{devmem},"devcore":{devcore},"type":"{kind}","health":true,'
        + f'"custominfo":{{"NetworkID":{i // 4}}}'
        + "}"
        for i in range(8)
    )
    SAMPLE_NODE[kind] = {
        f"hami.io/node-register-{kind}": f"[{npus}]",
        f"hami.io/node-handshake-{kind}": "Reported_2026.01.01 00:00:00",
        "hami-vnpu-core": "false",
    }
    SAMPLE_ALLOCATABLE[kind] = {f"huawei.com/{kind}": "32"}


for _kind, _mib, _cores in (
    ("Ascend910A", 32768, 30),
    ("Ascend910B2", 65536, 24),
    ("Ascend910B4-1", 65536, 20),
    ("Ascend910B4", 32768, 20),
    ("Ascend310P", 21527, 8),
    ("Ascend910C", 65536, 20),
):
    _ascend(_kind, _mib, _cores)


def _iluvatar(chip: str) -> None:
    """Another Iluvatar chip, registered as the MR-V100 above is (the `:` form)."""
    SAMPLE_NODE[chip] = {
        f"hami.io/node-{chip}-register": (
            f"GPU-{chip.lower()}-0,10,32768,100,Iluvatar {chip},0,true,0,hami-core:"
            f"GPU-{chip.lower()}-1,10,32768,100,Iluvatar {chip},0,true,1,hami-core:"
        ),
        f"hami.io/node-handshake-{chip}": "Reported 2026-01-01 00:00:00",
    }
    SAMPLE_ALLOCATABLE[chip] = {f"iluvatar.ai/{chip}-vgpu": "20"}


for _chip in ("MR-V50", "BI-V150", "BI-V100"):
    _iluvatar(_chip)
