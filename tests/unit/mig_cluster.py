"""A cluster with the issue's A100 in MIG mode, fed and bound as the extender would, for tests."""

from typing import Any

import orjson

from hami.cache.store import ClusterCache
from hami.engine import nvidianames as names
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.service.annotations import allocation_annotations
from hami.service.placement import Placement
from tests.builders import FAMILIES
from tests.reference.geometries import A100_40GB_MEMORY, A100_EXAMPLE, registration

GPU = "GPU-9c1b4c4e-7a4b-2b4d-b2a4-0b0e5b9f3a11"


def card(
    uuid: str = GPU, index: int = 0, mode: str = "mig", profiles: Any = A100_EXAMPLE
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": uuid,
        "index": index,
        "count": 7,
        "devmem": A100_40GB_MEMORY,
        "devcore": 100,
        "type": "NVIDIA A100-SXM4-40GB",
        "mode": mode,
        "health": True,
    }
    if mode == "mig":
        entry["migProfiles"] = registration(profiles)
    return entry


def node(name: str = "a100", *cards: dict[str, Any]) -> dict[str, Any]:
    listed = list(cards) or [card()]
    return {
        "metadata": {
            "name": name,
            "annotations": {names.NODE_REGISTER: orjson.dumps(listed).decode()},
        },
        "status": {"allocatable": {"nvidia.com/gpu": "7"}},
    }


def pod(
    name: str,
    *limits: dict[str, Any],
    init: tuple[dict[str, Any], ...] = (),
    mode: str | None = None,
) -> dict[str, Any]:
    def ctr(prefix: str, i: int, lim: dict[str, Any]) -> dict[str, Any]:
        return {"name": f"{prefix}{i}", "resources": {"limits": lim}}

    ann = {} if mode is None else {names.VGPU_MODE: mode}
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": name, "annotations": ann},
        "spec": {
            "initContainers": [ctr("i", i, lim) for i, lim in enumerate(init)],
            "containers": [ctr("c", i, lim) for i, lim in enumerate(limits)],
        },
    }


def gpu(mem: int = 0, **more: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"nvidia.com/gpu": more.pop("nums", 1)}
    if mem:
        out["nvidia.com/gpumem"] = mem
    out.update({f"nvidia.com/{k.replace('_', '-')}": v for k, v in more.items()})
    return out


class Cluster:
    """A cache fed like the extender's, binding what filter decides as bind would write it."""

    def __init__(self, *nodes: dict[str, Any]) -> None:
        self.cache = ClusterCache(
            clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults()
        )
        self.cache.replace_nodes(list(nodes) or [node()])
        self.names = [n["metadata"]["name"] for n in (nodes or [node()])]

    def place(self, obj: dict[str, Any]) -> tuple[dict[str, str], str]:
        """The annotations bind writes, or {} and the node's reason."""
        out = Placement(self.cache, Defaults(), ResourceDefaults()).filter(obj, self.names)
        d = out.decision
        if d is None or d.node is None or d.devices is None:
            return {}, ", ".join(f"{n}: {r}" for n, r in sorted(out.failed.items()))
        written = allocation_annotations(d.node, d.devices, 0, families=FAMILIES)
        obj["metadata"]["annotations"].update(written)
        obj["spec"]["nodeName"] = d.node
        self.cache.upsert_pod(obj)
        return written, ""
