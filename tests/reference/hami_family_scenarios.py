"""The scenarios record_hami.py plays to HAMi v2.10's scheduler, one per device family: data.

Each scenario is the nodes as that vendor's device plugin registers them (the annotation
keys and formats are read from HAMi's pkg/device/<vendor>: GetNodeDevices and CheckHealth) and
a table of steps: `filt` creates a pod and asks HAMi's /filter for it, `bind` asks its /bind
(the device plugin's Allocate is then played: bind-phase success, node lock released), `delete`
removes a pod. A handshake value of `Reported {now}` is what the plugins write; HAMi answers it
with `Requesting_<time>` and keeps the node while the count resource stays allocatable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

HAMI_VERSION = "v2.10.0"
NAMESPACE = "hami-ref"
NODE_POLICY = "hami.io/node-scheduler-policy"
GPU_POLICY = "hami.io/gpu-scheduler-policy"
REPORTED = "Reported {now}"


@dataclass(frozen=True)
class Node:
    name: str
    annotations: Mapping[str, str]
    allocatable: Mapping[str, str]
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    op: str  # filter | bind | delete
    pod: str
    containers: tuple[Mapping[str, Any], ...] = ()
    init_containers: tuple[Mapping[str, Any], ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    nodes: tuple[str, ...] = ()  # the candidates kube-scheduler passes; empty: every node
    note: str = ""


@dataclass(frozen=True)
class Scenario:
    family: str  # the fixture's file name
    types: tuple[str, ...]  # HAMi's device types (commonWord) the scenario exercises
    description: str
    nodes: tuple[Node, ...]
    steps: tuple[Step, ...]


def ctr(name: str = "c0", **limits: int | str) -> dict[str, Any]:
    """A container asking for `limits`; keyword names use `__` for `/` and `_` for `-`."""
    return {"name": name, "limits": {_resource(k): str(v) for k, v in limits.items()}}


def res(name: str = "c0", limits: Mapping[str, int | str] | None = None) -> dict[str, Any]:
    """A container asking for resources named as they are (any characters)."""
    return {"name": name, "limits": {k: str(v) for k, v in (limits or {}).items()}}


def _resource(key: str) -> str:
    return key.replace("__", "/").replace("_", "-")


def filt(
    pod: str,
    *containers: Mapping[str, Any],
    note: str = "",
    annotations: Mapping[str, str] | None = None,
    nodes: Sequence[str] = (),
    init: Sequence[Mapping[str, Any]] = (),
) -> Step:
    return Step(
        "filter",
        pod,
        tuple(containers),
        tuple(init),
        dict(annotations or {}),
        tuple(nodes),
        note,
    )


def bind(pod: str, note: str = "") -> Step:
    return Step("bind", pod, note=note)


def delete(pod: str, note: str = "") -> Step:
    return Step("delete", pod, note=note)


def pod_manifest(step: Step) -> dict[str, Any]:
    """The pod a step creates: no schedulerName, as /filter is called directly."""

    def container(c: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "name": c["name"],
            "image": "registry.k8s.io/pause:3.10",
            "resources": {"limits": dict(c["limits"])},
        }

    spec: dict[str, Any] = {"containers": [container(c) for c in step.containers]}
    if step.init_containers:
        spec["initContainers"] = [container(c) for c in step.init_containers]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": step.pod,
            "namespace": NAMESPACE,
            "annotations": dict(step.annotations),
        },
        "spec": spec,
    }


def encode_cards(cards: Sequence[tuple[str, int, int, int, str, int, bool, int, str]]) -> str:
    """HAMi's device.EncodeNodeDevices: `id,count,mem,cores,type,numa,health,index,mode:`."""
    return "".join(
        ",".join(str(f).lower() if isinstance(f, bool) else str(f) for f in c) + ":" for c in cards
    )


# --- Hygon DCU (pkg/device/hygon) -----------------------------------------------------------

_DCU_REG = "hami.io/node-dcu-register"
_DCU_HS = "hami.io/node-handshake-dcu"


def _dcu_node(name: str, model: str, mem: int, cards: int, prefix: str) -> Node:
    rows = [(f"{prefix}-{i}", 4, mem, 100, model, 0, True, i, "hami-core") for i in range(cards)]
    return Node(
        name,
        {_DCU_REG: encode_cards(rows), _DCU_HS: REPORTED},
        {"hygon.com/dcunum": str(4 * cards)},
    )


# --- the common table: most families answer the same kinds of question ----------------------


@dataclass(frozen=True)
class Ask:
    """How one family's container asks: `make(n, mem, cores, name)` builds the container."""

    make: Any  # Callable[[int, int, int, str], dict[str, Any]]
    mem: int  # a memory that fits one card (0: the family has no memory resource)
    cores: int  # cores that fit one card beside others (0: no core resource)
    too_much_mem: int  # more than any card has (0: skip)
    too_many: int  # more cards than any node has
    use_type: tuple[str, str] = ("", "")  # (annotation, value) choosing a model
    nouse_type: tuple[str, str] = ("", "")
    use_uuid: tuple[str, str] = ("", "")  # (annotation, the card held by `whole`)
    nouse_uuid: tuple[str, str] = ("", "")
    whole: Mapping[str, str] = field(default_factory=dict)  # annotations of the whole-card ask
    freed: str = "p4"  # the pod deleted before the retry (it holds the card use_uuid names)


def standard_steps(a: Ask, extra: Sequence[Step] = ()) -> tuple[Step, ...]:
    """Fits, fits nowhere, memory and cores, several cards, two containers, binpack and spread,
    type and UUID selection, a bind, a delete then a retry, and a node HAMi does not know."""
    one = a.make(1, a.mem, a.cores, "c0")
    steps = [
        filt("p1", one, note="fits: memory and cores"),
        filt("p2", a.make(2, a.mem, a.cores, "c0"), note="two cards in one container"),
    ]
    if a.too_much_mem:
        steps.append(filt("p3", a.make(1, a.too_much_mem, 0, "c0"), note="fits nowhere: memory"))
    steps += [
        filt(
            "p4", a.make(1, 0, 0, "c0"), annotations=a.whole, note="a whole card (no memory asked)"
        ),
        filt("p5", a.make(a.too_many, 0, 0, "c0"), note="fits nowhere: too many cards"),
    ]
    if a.use_type[0]:
        steps.append(filt("p6", one, annotations=dict([a.use_type]), note="type selection"))
    if a.nouse_type[0]:
        steps.append(filt("p7", one, annotations=dict([a.nouse_type]), note="type exclusion"))
    if a.use_uuid[0]:
        steps.append(
            filt(
                "p8",
                one,
                annotations=dict([a.use_uuid]),
                note="UUID selection: a card an earlier pod holds",
            )
        )
    if a.nouse_uuid[0]:
        steps.append(filt("p9", one, annotations=dict([a.nouse_uuid]), note="UUID exclusion"))
    steps += [
        filt(
            "p10",
            one,
            annotations={NODE_POLICY: "spread", GPU_POLICY: "binpack"},
            note="node spread, card binpack",
        ),
        filt(
            "p11",
            one,
            annotations={NODE_POLICY: "binpack", GPU_POLICY: "spread"},
            note="node binpack, card spread",
        ),
        filt(
            "p12",
            a.make(1, a.mem, a.cores, "a"),
            a.make(1, a.mem, a.cores, "b"),
            note="two containers",
        ),
        *extra,
        bind("p1", note="HAMi's bind: node lock and bind-phase"),
        delete(a.freed, note="a delete frees the card use_uuid names"),
    ]
    if a.use_uuid[0]:
        steps.append(
            filt("p14", one, annotations=dict([a.use_uuid]), note="retry of p8 after the delete")
        )
    else:
        steps.append(
            filt("p14", a.make(1, 0, 0, "c0"), note="retry of a whole card after the delete")
        )
    steps.append(
        filt("p15", one, nodes=("{first}", "no-such-node"), note="a node HAMi does not know")
    )
    return tuple(steps)


def json_cards(rows: Sequence[Mapping[str, Any]]) -> str:
    """HAMi's device.MarshalNodeDevices JSON, as the newer device plugins register."""
    return json.dumps(list(rows), separators=(",", ":"))


def _counted(count: str, mem: str = "", cores: str = "") -> Any:
    def make(n: int, m: int, c: int, name: str) -> dict[str, Any]:
        limits: dict[str, int] = {count: n}
        if mem and m:
            limits[mem] = m
        if cores and c:
            limits[cores] = c
        return res(name, limits)

    return make


_DCU_ASK = Ask(
    _counted("hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores"),
    mem=2000,
    cores=10,
    too_much_mem=70000,
    too_many=5,
    use_type=("hygon.com/use-dcutype", "Z100"),
    nouse_type=("hygon.com/nouse-dcutype", "K100"),
    use_uuid=("hygon.com/use-gpuuuid", "DCU-K100-b-3"),
    nouse_uuid=("hygon.com/nouse-gpuuuid", "DCU-Z100L-a-0,DCU-Z100L-a-1"),
)

HYGON = Scenario(
    "hygon",
    ("DCU",),
    "Two DCU nodes: dcu-a with two Z100L cards of 16 GiB, dcu-b with four K100_AI of 64 GiB.",
    (
        _dcu_node("dcu-a", "DCU-Z100L", 16384, 2, "DCU-Z100L-a"),
        _dcu_node("dcu-b", "DCU-K100_AI", 65536, 4, "DCU-K100-b"),
    ),
    standard_steps(
        _DCU_ASK,
        extra=(
            filt(
                "p13",
                res(
                    "c0",
                    {"hygon.com/dcunum": 1, "hygon.com/dcumem": 2000, "hygon.com/dcucores": 90},
                ),
                annotations={"hygon.com/use-dcutype": "Z100"},
                note="fits nowhere: the Z100L cards have no slot left (4 tasks each)",
            ),
        ),
    ),
)


def _dcu_mixed(name: str, model: str) -> Node:
    """Two DCU cards of one model, 16 GiB and 64 GiB, four tasks each."""
    rows = [
        (f"DCU-{name}-{i}", 4, mem, 100, model, 0, True, i, "hami-core")
        for i, mem in enumerate((16384, 65536))
    ]
    return Node(name, {_DCU_REG: encode_cards(rows), _DCU_HS: REPORTED}, {"hygon.com/dcunum": "8"})


def _one_dcu(pod: str, mem: int, policy: str, node: str, note: str) -> Step:
    """One DCU with `mem` MiB and 10 cores, the card policy `policy`, on dcu-x (`DCU`) or dcu-y
    (`DCU-Z100L`), chosen by type so that `hami simulate` replays it too."""
    ask = {"hygon.com/dcunum": 1, "hygon.com/dcumem": mem, "hygon.com/dcucores": 10}
    pick = "hygon.com/use-dcutype" if node == "dcu-y" else "hygon.com/nouse-dcutype"
    return filt(pod, res("c0", ask), annotations={GPU_POLICY: policy, pick: "Z100"}, note=note)


# HAMi's ComputeScore adds a container's request to the score of a card whose model equals the
# request's type exactly: on dcu-x (model `DCU`) binpack then prefers the small card (8000 MiB
# fill half of it), on dcu-y (`DCU-Z100L`) both idle cards score 0 and the walk takes the last.
HYGON_EXACT = Scenario(
    "hygon_exact",
    ("DCU",),
    "Two DCU nodes with a 16 GiB and a 64 GiB card each: dcu-x registers the model `DCU` (the "
    "request's type exactly), dcu-y `DCU-Z100L`.",
    (_dcu_mixed("dcu-x", "DCU"), _dcu_mixed("dcu-y", "DCU-Z100L")),
    (
        _one_dcu(
            "q1",
            8000,
            "binpack",
            "dcu-x",
            "model equals the type: the request counts in the card scores",
        ),
        _one_dcu("q2", 8000, "binpack", "dcu-y", "a longer model: scores from usage alone"),
        _one_dcu("q3", 2000, "spread", "dcu-x", "spread, model equals the type"),
        *standard_steps(
            replace(
                _DCU_ASK,
                too_many=3,
                nouse_type=("hygon.com/nouse-dcutype", "Z100"),
                use_uuid=("", ""),
                nouse_uuid=("hygon.com/nouse-gpuuuid", "DCU-dcu-x-0"),
            )
        ),
    ),
)


# --- Cambricon MLU (pkg/device/cambricon): cards from the node's capacity, no annotation -----

_MLU = "cambricon.com/vmlu"
_MLU_MEM = "cambricon.com/mlu.smlu.vmemory"  # units of 256 MiB
_MLU_CORE = "cambricon.com/mlu.smlu.vcore"


def _mlu_node(name: str, cards: int, mem_units_per_card: int) -> Node:
    # GetNodeDevices: cards = vcore capacity / 100; each card's memory =
    # vmemory capacity * 256 * 100 / vcore capacity.
    return Node(
        name,
        {},
        {
            _MLU: str(cards * 100),
            _MLU_CORE: str(cards * 100),
            _MLU_MEM: str(cards * mem_units_per_card),
        },
    )


CAMBRICON = Scenario(
    "cambricon",
    ("MLU",),
    "Two MLU nodes registered by capacity: mlu-a with 2 cards of 16 GiB, mlu-b with 4 of 24 GiB.",
    (_mlu_node("mlu-a", 2, 64), _mlu_node("mlu-b", 4, 96)),
    standard_steps(
        Ask(
            _counted(_MLU, _MLU_MEM, _MLU_CORE),
            mem=16,
            cores=20,
            too_much_mem=200,
            too_many=5,
            use_uuid=("cambricon.com/use-gpuuuid", "mlu-b-cambricon-mlu-3"),
            nouse_uuid=(
                "cambricon.com/nouse-gpuuuid",
                "mlu-a-cambricon-mlu-0,mlu-a-cambricon-mlu-1",
            ),
        )
    ),
)


# --- Iluvatar (pkg/device/iluvatar): one resource set and annotation set per chip -------------


def _ilu_node(name: str, chip: str, cards: int, mem: int) -> Node:
    rows = [
        (f"{chip}-{name}-{i}", 100, mem, 100, f"Iluvatar {chip}", 0, True, i, "hami-core")
        for i in range(cards)
    ]
    return Node(
        name,
        {
            f"hami.io/node-{chip}-register": encode_cards(rows),
            f"hami.io/node-handshake-{chip}": REPORTED,
        },
        {f"iluvatar.ai/{chip}-vgpu": str(100 * cards)},
    )


ILUVATAR = Scenario(
    "iluvatar",
    ("BI-V150", "MR-V100"),
    "ilu-a: two BI-V150 of 32 GiB; ilu-b: four MR-V100 of 32 GiB; ilu-c: two BI-V150 of 32 GiB.",
    (
        _ilu_node("ilu-a", "BI-V150", 2, 32768),
        _ilu_node("ilu-b", "MR-V100", 4, 32768),
        _ilu_node("ilu-c", "BI-V150", 2, 32768),
    ),
    standard_steps(
        Ask(
            _counted(
                "iluvatar.ai/BI-V150-vgpu", "iluvatar.ai/BI-V150.vMem", "iluvatar.ai/BI-V150.vCore"
            ),
            mem=16,  # units of 256 MiB
            cores=20,
            too_much_mem=200,
            too_many=3,
            use_uuid=("hami.io/use-BI-V150-uuid", "BI-V150-ilu-c-1"),
            nouse_uuid=("hami.io/no-use-BI-V150-uuid", "BI-V150-ilu-a-0,BI-V150-ilu-a-1"),
        ),
        extra=(
            filt(
                "p13",
                res("c0", {"iluvatar.ai/MR-V100-vgpu": 2, "iluvatar.ai/MR-V100.vMem": 8}),
                note="another chip: its own resource names pick its nodes",
            ),
        ),
    ),
)


# --- Moore Threads (pkg/device/mthreads): cards from capacity, 16 cores each -----------------

_MT = "mthreads.com/vgpu"
_MT_MEM = "mthreads.com/sgpu-memory"  # units of 512 MiB
_MT_CORE = "mthreads.com/sgpu-core"


def _mt_node(name: str, cards: int, mem_units_per_card: int) -> Node:
    return Node(
        name,
        {},
        {_MT: str(cards * 16), _MT_CORE: str(cards * 16), _MT_MEM: str(cards * mem_units_per_card)},
    )


MTHREADS = Scenario(
    "mthreads",
    ("Mthreads",),
    "mt-a: two cards of 48 GiB (16 cores each), mt-b: four cards of 32 GiB.",
    (_mt_node("mt-a", 2, 96), _mt_node("mt-b", 4, 64)),
    standard_steps(
        Ask(
            _counted(_MT, _MT_MEM, _MT_CORE),
            mem=8,
            cores=4,
            too_much_mem=128,
            too_many=5,
            use_uuid=("mthreads.ai/use-gpuuuid", "mt-b-mthreads-3"),
            nouse_uuid=("mthreads.ai/nouse-gpuuuid", "mt-a-mthreads-0,mt-a-mthreads-1"),
        )
    ),
)


# --- AMD (pkg/device/amd): JSON registration, health from the count capacity -----------------

_AMD = "amd.com/gpu"


def _amd_node(name: str, model: str, cards: int, mem: int) -> Node:
    rows = [
        {
            "id": f"AMD-{name}-{i}",
            "index": i,
            "count": 4,
            "devmem": mem,
            "devcore": 100,
            "type": model,
            "health": True,
        }
        for i in range(cards)
    ]
    return Node(name, {"hami.io/node-amd-register": json_cards(rows)}, {_AMD: str(4 * cards)})


AMD = Scenario(
    "amd",
    ("AMD",),
    "amd-a: two MI210 of 64 GiB; amd-b: four MI300X of 192 GiB.",
    (_amd_node("amd-a", "AMD-MI210", 2, 65536), _amd_node("amd-b", "AMD-MI300X", 4, 196608)),
    standard_steps(
        Ask(
            _counted(_AMD, "amd.com/gpumem", "amd.com/gpucores"),
            mem=8192,
            cores=20,
            too_much_mem=200000,
            too_many=5,
            use_type=("amd.com/use-gputype", "MI210"),
            nouse_type=("amd.com/nouse-gputype", "MI300"),
            use_uuid=("amd.com/use-gpu-uuid", "AMD-amd-b-3"),
            nouse_uuid=("amd.com/nouse-gpu-uuid", "AMD-amd-a-0,AMD-amd-a-1"),
        )
    ),
)


# --- Vastai and Biren: JSON registration with a handshake, whole cards only -----------------


def _whole_node(
    name: str, reg: str, hs: str, count: str, prefix: str, model: str, cards: int
) -> Node:
    rows = [
        {
            "id": f"{prefix}-{name}-{i}",
            "index": i,
            "count": 1,
            "devmem": 16384,
            "devcore": 100,
            "type": model,
            "health": True,
        }
        for i in range(cards)
    ]
    return Node(name, {reg: json_cards(rows), hs: REPORTED}, {count: str(cards)})


def _whole(count: str, use_uuid: str, nouse_uuid: str, prefix: str) -> Ask:
    return Ask(
        _counted(count),
        mem=0,
        cores=0,
        too_much_mem=0,
        too_many=5,
        use_uuid=(use_uuid, f"{prefix}-b-3"),
        nouse_uuid=(nouse_uuid, f"{prefix}-a-0,{prefix}-a-1"),
        freed="p2",
    )


VASTAI = Scenario(
    "vastai",
    ("Vastai",),
    "va-a: two cards, va-b: four cards (count only).",
    (
        _whole_node(
            "va-a",
            "hami.io/node-va-register",
            "hami.io/node-handshake-va",
            "vastaitech.com/va",
            "VA",
            "Vastai-VA1",
            2,
        ),
        _whole_node(
            "va-b",
            "hami.io/node-va-register",
            "hami.io/node-handshake-va",
            "vastaitech.com/va",
            "VA",
            "Vastai-VA1",
            4,
        ),
    ),
    standard_steps(
        _whole(
            "vastaitech.com/va",
            "vastaitech.com/use-gpuuuid",
            "vastaitech.com/nouse-gpuuuid",
            "VA-va",
        )
    ),
)

BIREN = Scenario(
    "biren",
    ("Biren",),
    "br-a: two cards, br-b: four cards (count only).",
    (
        _whole_node(
            "br-a",
            "hami.io/node-biren-register",
            "hami.io/node-handshake-biren",
            "birentech.com/gpu",
            "BR",
            "Biren-106C",
            2,
        ),
        _whole_node(
            "br-b",
            "hami.io/node-biren-register",
            "hami.io/node-handshake-biren",
            "birentech.com/gpu",
            "BR",
            "Biren-106C",
            4,
        ),
    ),
    standard_steps(
        _whole(
            "birentech.com/gpu", "birentech.com/use-gpuuuid", "birentech.com/nouse-gpuuuid", "BR-br"
        )
    ),
)


# --- AWS Neuron (pkg/device/awsneuron): devices and cores from capacity ----------------------

_NEURON = "aws.amazon.com/neuron"
_NCORE = "aws.amazon.com/neuroncore"


def _neuron_node(name: str, devices: int, instance: str) -> Node:
    return Node(
        name,
        {},
        {_NEURON: str(devices), _NCORE: str(2 * devices)},
        {"node.kubernetes.io/instance-type": instance},
    )


def _neuron(n: int, m: int, c: int, name: str) -> dict[str, Any]:
    # Several devices, else cores when asked for, else one device: HAMi reads one or the other.
    return res(name, {_NCORE: c} if c and n == 1 else {_NEURON: n})


AWSNEURON = Scenario(
    "awsneuron",
    ("AWSNeuron",),
    "nrn-a: inf2.xlarge (one device, two cores); nrn-b: inf2.24xlarge (six devices, twelve cores).",
    (_neuron_node("nrn-a", 1, "inf2.xlarge"), _neuron_node("nrn-b", 6, "inf2.24xlarge")),
    standard_steps(
        Ask(
            _neuron,
            mem=0,
            cores=1,
            too_much_mem=0,
            too_many=7,
            use_uuid=("aws.amazon.com/use-neuron-uuid", "nrn-b-AWSNeuron-5"),
            nouse_uuid=("aws.amazon.com/nouse-neuron-uuid", "nrn-a-AWSNeuron-0"),
        ),
        extra=(
            filt("p13", res("c0", {_NCORE: 2}), note="two cores: one whole device"),
            filt("p16", res("c0", {_NEURON: 4}), note="four devices: HAMi's ring of neighbours"),
        ),
    ),
)


# --- Huawei Ascend (pkg/device/ascend): one annotation set per chip, vNPU templates ----------

_B3 = "huawei.com/Ascend910B3"


def _npu_node(name: str, chip: str, cards: int, mem: int, cores: int, network: bool) -> Node:
    rows = []
    for i in range(cards):
        row: dict[str, Any] = {
            "id": f"{chip}-{name}-{i}",
            "index": i,
            "count": 4,
            "devmem": mem,
            "devcore": cores,
            "type": chip,
            "health": True,
        }
        if network:
            row["custominfo"] = {"NetworkID": i // 4}
        rows.append(row)
    return Node(
        name,
        {
            f"hami.io/node-register-{chip}": json_cards(rows),
            f"hami.io/node-handshake-{chip}": REPORTED,
        },
        {f"huawei.com/{chip}": str(cards)},
    )


def _npu(
    n: int = 1, mem: int = 0, cores: int = 0, name: str = "c0", chip: str = _B3
) -> dict[str, Any]:
    limits: dict[str, int] = {chip: n}
    if mem:
        limits[f"{chip}-memory"] = mem
    if cores:
        limits[f"{chip}-core"] = cores
    return res(name, limits)


ASCEND = Scenario(
    "ascend",
    ("Ascend910B3", "Ascend310P"),
    "npu-a: eight 910B3 in two network groups (NetworkID 0 and 1); npu-b: four 910B3 without "
    "network IDs; npu-c: two 310P3. Pods pass HAMi's webhook first (template rounding).",
    (
        _npu_node("npu-a", "Ascend910B3", 8, 65536, 20, True),
        _npu_node("npu-b", "Ascend910B3", 4, 65536, 20, False),
        _npu_node("npu-c", "Ascend310P", 2, 21527, 8, False),
    ),
    (
        filt("p1", _npu(1, mem=16384), note="fits: a vir05_1c_16g slice"),
        filt("p2", _npu(1, mem=20000), note="memory rounded up to the vir10_3c_32g template"),
        filt("p3", _npu(2), note="two whole cards: one network group"),
        filt("p4", _npu(1), note="a whole card (no memory asked)"),
        filt("p5", _npu(2, mem=8192), note="the webhook refuses a vNPU on several cards"),
        filt("p6", _npu(1, mem=70000), note="the webhook refuses memory above the card"),
        filt("p7", _npu(1, mem=16384, cores=5), note="cores outside hami-core mode: refused"),
        filt("p8", _npu(9), note="fits nowhere: nine cards"),
        filt(
            "p9",
            _npu(1, mem=16384),
            annotations={"hami.io/use-Ascend910B3-uuid": "Ascend910B3-npu-b-3"},
            note="UUID selection",
        ),
        filt(
            "p10",
            _npu(1, mem=16384),
            annotations={
                "hami.io/no-use-Ascend910B3-uuid": ",".join(
                    f"Ascend910B3-npu-a-{i}" for i in range(8)
                )
            },
            note="UUID exclusion",
        ),
        filt(
            "p11",
            _npu(1, mem=16384),
            annotations={NODE_POLICY: "spread", GPU_POLICY: "binpack"},
            note="node spread, card binpack",
        ),
        filt(
            "p12", _npu(1, mem=32768, name="a"), _npu(1, mem=16384, name="b"), note="two containers"
        ),
        filt(
            "p13", _npu(1, mem=3000, chip="huawei.com/Ascend310P"), note="another chip: 310P vir01"
        ),
        filt(
            "p16",
            _npu(1, mem=4000, cores=20),
            annotations={"huawei.com/vnpu-mode": "hami-core"},
            note="hami-core mode on nodes without hami-vnpu-core: ModeNotFit",
        ),
        filt("p17", _npu(3), note="fits nowhere: three whole cards"),
        bind("p1", note="HAMi's bind: node lock and bind-phase"),
        delete("p3", note="a delete frees two whole cards of network group 0"),
        filt("p14", _npu(3), note="retry of p17 after the delete"),
        filt(
            "p15",
            _npu(1, mem=16384),
            nodes=("npu-b", "no-such-node"),
            note="a node HAMi does not know",
        ),
    ),
)

# --- Enflame (pkg/device/enflame): whole GCUs by capacity, DRS slices by annotation ---------

_DRS = "enflame.com/drs-gcu"
_DRS_PROFILES = {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"}


def _drs_node(name: str, cards: int) -> Node:
    spec = {
        "devices": [{"index": str(i), "minor": str(i), "capacity": 6} for i in range(cards)],
        "profiles": _DRS_PROFILES,
    }
    return Node(name, {"enflame.com/gcu-drs-capacity": json.dumps(spec)}, {_DRS: str(6 * cards)})


ENFLAME = Scenario(
    "enflame",
    ("Enflame", "GCU"),
    "gcu-a: four whole GCUs (capacity); drs-a: two DRS cards, drs-b: four DRS cards "
    "(capacity 6 slices, profiles 1g.6gb/3g.20gb/6g.40gb).",
    (
        Node("gcu-a", {}, {"enflame.com/gcu": "4"}),
        _drs_node("drs-a", 2),
        _drs_node("drs-b", 4),
    ),
    (
        filt("p1", res("c0", {_DRS: 1}), note="fits: one DRS slice"),
        filt("p2", res("c0", {_DRS: 3}), note="three slices: profile 3g.20gb"),
        filt("p3", res("c0", {_DRS: 6}), note="six slices: a whole card's profile"),
        filt("p4", res("c0", {_DRS: 2}), note="two slices: no such profile"),
        filt("p5", res("c0", {_DRS: 7}), note="fits nowhere: more slices than any profile"),
        filt(
            "p6",
            res("c0", {"enflame.com/gcu-memory": 10}),
            note="by memory: the profile that holds it",
        ),
        filt("p7", res("c0", {"enflame.com/gcu-core": 50}), note="by core share"),
        filt("p8", res("c0", {"enflame.com/gcu": 2}), note="two whole GCUs"),
        filt("p9", res("c0", {"enflame.com/gcu": 5}), note="fits nowhere: five whole GCUs"),
        filt(
            "p10",
            res("c0", {_DRS: 1}),
            annotations={"enflame.com/use-gpuuuid": "drs-b-enflame-drs-3"},
            note="UUID selection",
        ),
        filt(
            "p11",
            res("c0", {_DRS: 1}),
            annotations={"enflame.com/nouse-gpuuuid": "drs-a-enflame-drs-0,drs-a-enflame-drs-1"},
            note="UUID exclusion",
        ),
        filt(
            "p12",
            res("c0", {_DRS: 1}),
            annotations={NODE_POLICY: "spread", GPU_POLICY: "binpack"},
            note="node spread, card binpack",
        ),
        filt(
            "p13",
            res("c0", {_DRS: 1}),
            annotations={NODE_POLICY: "binpack", GPU_POLICY: "spread"},
            note="node binpack, card spread",
        ),
        filt("p16", res("a", {_DRS: 1}), res("b", {_DRS: 3}), note="two containers"),
        filt(
            "p17",
            res("c0", {_DRS: 6}),
            annotations={"enflame.com/use-gpuuuid": "drs-a-enflame-drs-1"},
            note="a whole card a slice already uses: fits nowhere",
        ),
        bind("p1", note="HAMi's bind: node lock and bind-phase"),
        delete("p3", note="a delete frees the card p10 asked for"),
        filt(
            "p14",
            res("c0", {_DRS: 1}),
            annotations={"enflame.com/use-gpuuuid": "drs-b-enflame-drs-3"},
            note="retry of p10 after the delete",
        ),
        filt(
            "p15",
            res("c0", {_DRS: 1}),
            nodes=("drs-a", "no-such-node"),
            note="a node HAMi does not know",
        ),
    ),
)


# --- Kunlunxin (pkg/device/kunlun): whole XPUs by capacity (topology), vXPU by annotation ----

_XPU = "kunlunxin.com/xpu"
_VXPU = "kunlunxin.com/vxpu"
_VXPU_MEM = "kunlunxin.com/vxpu-memory"


def _vxpu_node(name: str, cards: int) -> Node:
    rows = [
        {
            "id": f"XPU-{name}-{i}",
            "index": i,
            "count": 4,
            "devmem": 98304,
            "devcore": 100,
            "type": "XPU-P800",
            "numa": 0 if i < cards // 2 else 1,
            "health": True,
        }
        for i in range(cards)
    ]
    return Node(
        name,
        {"hami.io/node-register-xpu": json_cards(rows), "hami.io/node-handshake-xpu": REPORTED},
        {_VXPU: str(4 * cards)},
    )


KUNLUNXIN = Scenario(
    "kunlunxin",
    ("kunlun", "XPU"),
    "xpu-a: eight whole P800 (capacity, two groups of four); vxpu-a: eight vXPU-capable cards, "
    "vxpu-b: four.",
    (
        Node("xpu-a", {}, {_XPU: "8"}),
        _vxpu_node("vxpu-a", 8),
        _vxpu_node("vxpu-b", 4),
    ),
    (
        filt("p1", res("c0", {_XPU: 1}), note="fits: one whole XPU"),
        filt("p2", res("c0", {_XPU: 2}), note="two whole XPUs: a connected pair"),
        filt("p3", res("c0", {_XPU: 4}), note="four: one group"),
        filt("p4", res("c0", {_XPU: 3}), note="three: HAMi's topology refuses odd counts?"),
        filt("p5", res("c0", {_XPU: 9}), note="fits nowhere: nine"),
        filt("p6", res("c0", {_VXPU: 1, _VXPU_MEM: 20000}), note="vXPU: memory rounds up to 24576"),
        filt("p7", res("c0", {_VXPU: 1, _VXPU_MEM: 40000}), note="vXPU: rounds up to 49152"),
        filt("p8", res("c0", {_VXPU: 1}), note="vXPU without memory: a whole card"),
        filt("p9", res("c0", {_VXPU: 2, _VXPU_MEM: 24576}), note="two vXPUs"),
        filt(
            "p10",
            res("c0", {_VXPU: 1, _VXPU_MEM: 24576}),
            annotations={"hami.io/use-xpu-uuid": "XPU-vxpu-b-3"},
            note="UUID selection",
        ),
        filt(
            "p11",
            res("c0", {_VXPU: 1, _VXPU_MEM: 24576}),
            annotations={"hami.io/no-use-xpu-uuid": ",".join(f"XPU-vxpu-a-{i}" for i in range(8))},
            note="UUID exclusion",
        ),
        filt(
            "p12",
            res("c0", {_VXPU: 1, _VXPU_MEM: 24576}),
            annotations={NODE_POLICY: "spread", GPU_POLICY: "binpack"},
            note="node spread, card binpack",
        ),
        filt(
            "p13",
            res("a", {_VXPU: 1, _VXPU_MEM: 24576}),
            res("b", {_VXPU: 1, _VXPU_MEM: 49152}),
            note="two containers",
        ),
        filt(
            "p16",
            res("c0", {_VXPU: 1, _VXPU_MEM: 24576}),
            annotations={GPU_POLICY: "mutex"},
            note="mutex: only unused cards",
        ),
        filt("p17", res("c0", {_XPU: 8}), note="fits nowhere: eight whole XPUs after p1-p3"),
        bind("p1", note="HAMi's bind: node lock and bind-phase"),
        delete("p3", note="a delete frees a group of four"),
        filt("p14", res("c0", {_XPU: 4}), note="retry: four whole XPUs after the delete"),
        filt(
            "p15",
            res("c0", {_XPU: 1}),
            nodes=("xpu-a", "no-such-node"),
            note="a node HAMi does not know",
        ),
    ),
)


# --- MetaX (pkg/device/metax): exclusive GPUs by capacity, sGPU by annotation ----------------

_MX = "metax-tech.com/gpu"
_SGPU = "metax-tech.com/sgpu"
_SGPU_MEM = "metax-tech.com/vmemory"  # GiB without a unit
_SGPU_CORE = "metax-tech.com/vcore"
_QOS = "metax-tech.com/sgpu-qos-policy"


def _sgpu_node(name: str, cards: int, qos: str) -> Node:
    rows = [
        {
            "uuid": f"GPU-{name}-{i}",
            "bdf": f"0000:0{i}:00.0",
            "model": "MXC500",
            "totalDevCount": 16,
            "totalCompute": 100,
            "totalVRam": 65536,
            "availableDevCount": 16,
            "availableCompute": 100,
            "availableVRam": 65536,
            "numa": 0,
            "healthy": True,
            "qosPolicy": qos,
            "linkZone": 1 + i // 2,
        }
        for i in range(cards)
    ]
    return Node(
        name, {"metax-tech.com/node-gpu-devices": json.dumps(rows)}, {_SGPU: str(16 * cards)}
    )


def _sgpu(n: int = 1, mem: int = 0, cores: int = 0, name: str = "c0") -> dict[str, Any]:
    limits: dict[str, int] = {_SGPU: n}
    if mem:
        limits[_SGPU_MEM] = mem
    if cores:
        limits[_SGPU_CORE] = cores
    return res(name, limits)


METAX = Scenario(
    "metax",
    ("Metax-GPU", "Metax-SGPU"),
    "mx-a: four exclusive GPUs (capacity) with topology loss/score annotations; sg-a: four "
    "sGPU cards (best-effort), sg-b: two (fixed-share).",
    (
        Node(
            "mx-a",
            {
                "metax-tech.com/gpu.topology.losses": json.dumps({"1": 0, "2": 10, "4": 30}),
                "metax-tech.com/gpu.topology.scores": json.dumps({"1": 100, "2": 80, "4": 50}),
            },
            {_MX: "4"},
        ),
        _sgpu_node("sg-a", 4, "best-effort"),
        _sgpu_node("sg-b", 2, "fixed-share"),
    ),
    (
        filt("p1", res("c0", {_MX: 1}), note="fits: one exclusive GPU"),
        filt("p2", res("c0", {_MX: 2}), note="two exclusive GPUs"),
        filt("p3", res("c0", {_MX: 2}), note="fits nowhere once p1 and p2 hold three"),
        filt(
            "p4",
            _sgpu(1, mem=8, cores=20),
            annotations={_QOS: "best-effort"},
            note="sGPU: memory and cores",
        ),
        filt("p5", _sgpu(1, mem=100), note="fits nowhere: more memory than any card"),
        filt(
            "p6",
            _sgpu(2, mem=4, cores=10),
            annotations={_QOS: "best-effort"},
            note="two sGPUs in one container",
        ),
        filt("p7", _sgpu(1), note="no memory or cores: a whole card"),
        filt(
            "p8",
            _sgpu(1, mem=4, cores=10),
            annotations={_QOS: "fixed-share"},
            note="QoS fixed-share: cards in another policy refuse",
        ),
        filt(
            "p9",
            _sgpu(1, mem=4, cores=10),
            annotations={_QOS: "best-effort", "metax-tech.com/use-gpuuuid": "GPU-sg-a-3"},
            note="UUID selection",
        ),
        filt(
            "p10",
            _sgpu(1, mem=4, cores=10),
            annotations={
                _QOS: "best-effort",
                "metax-tech.com/nouse-gpuuuid": "GPU-sg-a-0,GPU-sg-a-1",
            },
            note="UUID exclusion",
        ),
        filt(
            "p11",
            _sgpu(1, mem=4, cores=10),
            annotations={_QOS: "best-effort", NODE_POLICY: "spread", GPU_POLICY: "binpack"},
            note="node spread, card binpack",
        ),
        filt(
            "p12",
            _sgpu(1, mem=4, cores=10, name="a"),
            _sgpu(1, mem=4, cores=10, name="b"),
            annotations={_QOS: "best-effort"},
            note="two containers",
        ),
        filt("p13", _sgpu(5, mem=4, cores=10), note="fits nowhere: five sGPUs"),
        bind("p1", note="HAMi's bind: node lock and bind-phase"),
        delete("p2", note="a delete frees two exclusive GPUs"),
        filt("p14", res("c0", {_MX: 2}), note="retry of p3 after the delete"),
        filt(
            "p15",
            _sgpu(1, mem=4, cores=10),
            nodes=("sg-b", "no-such-node"),
            note="a node HAMi does not know",
        ),
    ),
)

# --- NVIDIA beside another family in one pod (HAMi fits each family's ask on its own cards) --


def _nv_node(name: str, cards: int) -> Node:
    rows = [
        {
            "id": f"GPU-{name}-{i}",
            "index": i,
            "count": 10,
            "devmem": 15360,
            "devcore": 100,
            "type": "NVIDIA-Tesla T4",
            "health": True,
            "mode": "hami-core",
        }
        for i in range(cards)
    ]
    return Node(
        name,
        {"hami.io/node-nvidia-register": json_cards(rows), "hami.io/node-handshake": REPORTED},
        {"nvidia.com/gpu": str(10 * cards)},
    )


def _both(name: str, gpus: int, dcus: int) -> Node:
    nv, dcu = _nv_node(name, gpus), _dcu_node(name, "DCU-Z100L", 16384, dcus, f"DCU-{name}")
    return Node(name, {**nv.annotations, **dcu.annotations}, {**nv.allocatable, **dcu.allocatable})


def _gpu(n: int = 1, mem: int = 0, cores: int = 0) -> dict[str, int]:
    limits = {"nvidia.com/gpu": n}
    if mem:
        limits["nvidia.com/gpumem"] = mem
    if cores:
        limits["nvidia.com/gpucores"] = cores
    return limits


MIXED = Scenario(
    "nvidia_mixed",
    ("NVIDIA", "DCU"),
    "mix-a: two T4 and two Z100L DCUs; nv-b: two T4; dcu-c: two Z100L. Pods ask for NVIDIA and "
    "Hygon together: in one container, in two containers, or one family where the other is full.",
    (
        _both("mix-a", 2, 2),
        _nv_node("nv-b", 2),
        _dcu_node("dcu-c", "DCU-Z100L", 16384, 2, "DCU-dcu-c"),
    ),
    (
        filt(
            "p1",
            res(
                "c0",
                {
                    **_gpu(1, 4000, 20),
                    "hygon.com/dcunum": 1,
                    "hygon.com/dcumem": 4000,
                    "hygon.com/dcucores": 10,
                },
            ),
            note="both families in one container",
        ),
        filt(
            "p2",
            res("a", _gpu(1, 2000)),
            res("b", {"hygon.com/dcunum": 1, "hygon.com/dcumem": 2000, "hygon.com/dcucores": 10}),
            note="one family per container",
        ),
        filt("p3", res("c0", _gpu(1, 3000)), note="NVIDIA only"),
        filt(
            "p4",
            res("c0", {"hygon.com/dcunum": 1, "hygon.com/dcumem": 3000, "hygon.com/dcucores": 10}),
            note="DCU only",
        ),
        filt(
            "p5",
            res("c0", {**_gpu(3), "hygon.com/dcunum": 1}),
            note="fits nowhere: three GPUs beside a DCU",
        ),
        filt(
            "p6",
            res("c0", {**_gpu(1, 20000), "hygon.com/dcunum": 1}),
            note="fits nowhere: GPU memory",
        ),
        filt(
            "p7",
            res(
                "c0",
                {
                    **_gpu(1, 1000),
                    "hygon.com/dcunum": 1,
                    "hygon.com/dcumem": 20000,
                    "hygon.com/dcucores": 10,
                },
            ),
            note="fits nowhere: DCU memory",
        ),
        filt(
            "p8",
            res(
                "c0",
                {
                    **_gpu(1, 1000),
                    "hygon.com/dcunum": 1,
                    "hygon.com/dcumem": 1000,
                    "hygon.com/dcucores": 10,
                },
            ),
            annotations={
                "nvidia.com/use-gpuuuid": "GPU-mix-a-0",
                "hygon.com/use-gpuuuid": "DCU-mix-a-1",
            },
            note="UUID selection in both families",
        ),
        filt(
            "p9",
            res(
                "c0",
                {
                    **_gpu(2, 1000),
                    "hygon.com/dcunum": 2,
                    "hygon.com/dcumem": 1000,
                    "hygon.com/dcucores": 10,
                },
            ),
            note="two of each",
        ),
        filt(
            "p10",
            res(
                "c0",
                {
                    **_gpu(1, 1000),
                    "hygon.com/dcunum": 1,
                    "hygon.com/dcumem": 1000,
                    "hygon.com/dcucores": 10,
                },
            ),
            annotations={NODE_POLICY: "spread", GPU_POLICY: "binpack"},
            note="node spread, card binpack",
        ),
        filt(
            "p11",
            res(
                "c0",
                {
                    **_gpu(1, 1000),
                    "hygon.com/dcunum": 1,
                    "hygon.com/dcumem": 1000,
                    "hygon.com/dcucores": 10,
                },
            ),
            annotations={"nvidia.com/use-gputype": "A100"},
            note="fits nowhere: no A100",
        ),
        filt(
            "p12",
            res(
                "c0",
                {
                    **_gpu(1, 1000, 100),
                    "hygon.com/dcunum": 1,
                    "hygon.com/dcumem": 1000,
                    "hygon.com/dcucores": 10,
                },
            ),
            note="a whole GPU's cores beside a DCU",
        ),
        bind("p1", note="HAMi's bind: both families' node locks"),
        delete("p1", note="a delete frees GPU-mix-a-1's cores"),
        delete("p9", note="a delete frees the rest of GPU-mix-a-1"),
        filt(
            "p14",
            res(
                "c0",
                {
                    **_gpu(1, 1000, 100),
                    "hygon.com/dcunum": 1,
                    "hygon.com/dcumem": 1000,
                    "hygon.com/dcucores": 10,
                },
            ),
            note="retry of p12 after the delete",
        ),
        filt(
            "p15",
            res("c0", {**_gpu(1, 1000), "hygon.com/dcunum": 1}),
            nodes=("nv-b", "dcu-c"),
            note="no node has both",
        ),
    ),
)

# --- NVIDIA beside MetaX GPUs: HAMi scores every device type of the node ------------------

_MX_LOSSES = json.dumps({"0": 5, "1": 0, "2": 10, "4": 30})
_MX_SCORES = json.dumps({"0": 60, "1": 100, "2": 80, "4": 50})


def _nv_metax(name: str) -> Node:
    nv = _nv_node(name, 2)
    return Node(
        name,
        {
            **nv.annotations,
            "metax-tech.com/gpu.topology.losses": _MX_LOSSES,
            "metax-tech.com/gpu.topology.scores": _MX_SCORES,
        },
        {**nv.allocatable, _MX: "4"},
    )


NVIDIA_METAX = Scenario(
    "nvidia_metax",
    ("NVIDIA", "Metax-GPU"),
    "mx-nv: two T4 and four MetaX exclusive GPUs with topology loss/score annotations; nv-b: "
    "two T4. HAMi adds each device type's ScoreNode to the node score, a type the pod asks "
    "nothing of too: NVIDIA-only pods see MetaX's 2000 less its 0-card entry.",
    (_nv_metax("mx-nv"), _nv_node("nv-b", 2)),
    (
        filt(
            "p1",
            res("c0", _gpu(1, 3000)),
            annotations={"nvidia.com/use-gpuuuid": "GPU-nv-b-0"},
            note="NVIDIA only, on nv-b (UUID selection)",
        ),
        filt("p2", res("c0", _gpu(1, 3000)), note="binpack: MetaX's score beats nv-b's usage"),
        filt(
            "p3",
            res("c0", _gpu(1, 1000)),
            annotations={NODE_POLICY: "spread"},
            note="spread: MetaX's score makes mx-nv the busier",
        ),
        filt("p4", res("c0", {_MX: 1}), note="MetaX only"),
        filt("p5", res("c0", {**_gpu(1, 1000), _MX: 1}), note="both families in one container"),
        filt(
            "p6",
            res("a", _gpu(1, 1000)),
            res("b", {_MX: 2}),
            annotations={NODE_POLICY: "spread"},
            note="spread, one family per container",
        ),
        filt("p7", res("c0", _gpu(2, 1000)), note="two GPUs"),
        filt("p8", res("c0", _gpu(3)), note="fits nowhere: three GPUs"),
        filt(
            "p9",
            res("c0", _gpu(1, 1000)),
            annotations={NODE_POLICY: "spread", GPU_POLICY: "binpack"},
            note="node spread, card binpack",
        ),
        filt(
            "p10",
            res("c0", _gpu(1, 1000)),
            annotations={"nvidia.com/use-gpuuuid": "GPU-nv-b-1"},
            note="UUID selection: only nv-b's other card",
        ),
        bind("p2", note="HAMi's bind"),
        delete("p1", note="a delete frees nv-b's card"),
        filt("p11", res("c0", _gpu(1, 3000)), note="binpack after the delete"),
        filt(
            "p12",
            res("c0", _gpu(1, 3000)),
            nodes=("nv-b",),
            annotations={NODE_POLICY: "spread"},
            note="only nv-b a candidate",
        ),
    ),
)

SCENARIOS: tuple[Scenario, ...] = (
    HYGON,
    HYGON_EXACT,
    CAMBRICON,
    ILUVATAR,
    MTHREADS,
    AMD,
    VASTAI,
    BIREN,
    AWSNEURON,
    ASCEND,
    ENFLAME,
    KUNLUNXIN,
    METAX,
    MIXED,
    NVIDIA_METAX,
)
