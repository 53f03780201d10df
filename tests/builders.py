"""The objects tests feed the scheduler, built one way: cards, registered nodes, GPU pods.

Each builder gives the smallest object the product reads as the real thing (a Node as HAMi's
device plugin registers it, a Pod as kube-apiserver holds it); a test adds what it is about.
"""

from collections.abc import Sequence
from typing import Any

from hami.engine import nvidianames as names
from hami.engine.codec import encode_node_devices
from hami.engine.families.base import Family
from hami.engine.families.registry import Families, from_device_config
from hami.engine.model import DeviceInfo
from tests.families_samples import SAMPLE_ALLOCATABLE, SAMPLE_LABELS, SAMPLE_NODE

# Every family HAMi schedules, as the chart's default device config configures them, the gated
# ones included: what the tests schedule unless one says otherwise (the engine has no default).
FAMILIES: Families = from_device_config({})

Obj = dict[str, Any]
T4 = "NVIDIA-Tesla T4"
T4_MIB = 15360


def t4(index: int, *, uuid: str = "", count: int = 10, numa: int = 0) -> DeviceInfo:
    """A Tesla T4 as HAMi's device plugin registers it: 15360 MiB, 100 % cores, `count` slots;
    its UUID is GPU-<index> unless given."""
    return DeviceInfo(uuid or f"GPU-{index}", index, count, T4_MIB, 100, T4, numa)


def t4s(n: int, prefix: str = "GPU") -> tuple[DeviceInfo, ...]:
    return tuple(t4(i, uuid=f"{prefix}-{i}") for i in range(n))


def registered_node(
    name: str, cards: Sequence[DeviceInfo], *, allocatable: str | None = None, **annotations: str
) -> Obj:
    """A Node with HAMi's register annotation for `cards` and their slots allocatable (unless
    `allocatable` says otherwise)."""
    slots = str(sum(c.count for c in cards)) if allocatable is None else allocatable
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {names.NODE_REGISTER: encode_node_devices(tuple(cards)), **annotations},
        },
        "status": {"allocatable": {"nvidia.com/gpu": slots}},
    }


def gpu_pod(
    name: str,
    namespace: str = "ns",
    *,
    gpus: int = 1,
    mem: int | None = 1000,
    uid: str = "",
    node: str = "",
    annotations: dict[str, str] | None = None,
    phase: str = "Pending",
) -> Obj:
    """A pod of one container asking for `gpus` cards of `mem` MiB each (None: whole cards),
    with uid uid-<name> unless given, bound to `node` when one is given."""
    # Quantities as the API server gives them: strings.
    limits = {"nvidia.com/gpu": str(gpus)}
    if mem is not None:
        limits["nvidia.com/gpumem"] = str(mem)
    spec: Obj = {
        "schedulerName": "hami-scheduler",
        "containers": [{"name": "c", "image": "busybox", "resources": {"limits": limits}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
        "status": {"phase": phase},
    }


# --- the other device families (hami/engine/families) ---------------------------------------------

# A sample card per family, by FamilyWire.type: (model, MiB, cores, slots). Stand-ins chosen
# for the tests, not read from a vendor's device plugin; a family missing here gets the
# generic one, so that a family added to the registry is tested without an edit here.
SAMPLE_CARDS: dict[str, tuple[str, int, int, int]] = {
    "DCU": ("DCU-Z100L", 32768, 100, 4),
}


def sample_card(family: Family, index: int, *, uuid: str = "", numa: int = 0) -> DeviceInfo:
    """Card `index` of the family's sample model, with UUID <type>-<index> unless given."""
    kind = family.wire.type
    model, mib, cores, slots = SAMPLE_CARDS.get(kind, (f"{kind}-SAMPLE", 16384, 100, 4))
    return DeviceInfo(uuid or f"{kind}-{index}", index, slots, mib, cores, model, numa)


def family_node(name: str, family: Family, cards: Sequence[DeviceInfo], **annotations: str) -> Obj:
    """A Node as the family's device plugin registers it: its registration annotation and
    handshake, and its count resource allocatable (one per card's slot)."""
    wire = family.wire
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                wire.register_annotation: encode_node_devices(tuple(cards)),
                wire.handshake_annotation: "Reported_2026-08-21 10:00:00",
                **annotations,
            },
        },
        "status": {"allocatable": {wire.resources.count: str(sum(c.count for c in cards))}},
    }


def family_limits(family: Family, count: int = 1, mem: int | None = None) -> dict[str, str]:
    """A container's limits asking `count` of the family's devices, `mem` MiB each where the
    family has a memory resource."""
    names = family.wire.resources
    limits = {names.count: str(count)}
    if mem is not None and names.memory:
        limits[names.memory] = str(mem)
    return limits


def family_pod(
    name: str,
    family: Family,
    namespace: str = "ns",
    *,
    count: int = 1,
    mem: int | None = None,
    annotations: dict[str, str] | None = None,
) -> Obj:
    """gpu_pod's counterpart: one container asking for the family's devices."""
    pod = gpu_pod(name, namespace, annotations=annotations)
    pod["spec"]["containers"][0]["resources"] = {"limits": family_limits(family, count, mem)}
    return pod


def sample_node(name: str, family: Family, **annotations: str) -> Obj:
    """A Node as the family's device plugin registers it in tests/families_samples.py (its
    annotations, allocatable resources and labels; `annotations` added), or, for a family
    without a sample there, two of its SAMPLE_CARDS stand-ins (family_node)."""
    kind = family.wire.type
    if kind not in SAMPLE_NODE:
        cards = [sample_card(family, i, uuid=f"{name}-{kind}-{i}") for i in range(2)]
        return family_node(name, family, cards, **annotations)
    allocatable = dict(SAMPLE_ALLOCATABLE[kind])
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "annotations": {**SAMPLE_NODE[kind], **annotations},
            "labels": dict(SAMPLE_LABELS.get(kind, {})),
        },
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }
