"""MetaX's names on the wire and its section of HAMi's `device-config.yaml`.

Two HAMi device types share the section (HAMi's pkg/device/metax): the exclusive GPU
(`Metax-GPU`, whole cards counted from the node's capacity) and the shared sGPU
(`Metax-SGPU`, cards registered in a node annotation, split by memory and compute).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

GPU_TYPE: Final = "Metax-GPU"
SGPU_TYPE: Final = "Metax-SGPU"

# Node annotations MetaX's device plugins write.
SGPU_REGISTER: Final = "metax-tech.com/node-gpu-devices"
GPU_LOSSES: Final = "metax-tech.com/gpu.topology.losses"  # cards asked -> link loss (binpack)
GPU_SCORES: Final = "metax-tech.com/gpu.topology.scores"  # cards asked -> link score (spread)

# Pod annotations: what the sGPU device plugin reads after a bind...
SGPU_PLUGIN_ALLOCATED: Final = "metax-tech.com/gpu-devices-allocated"
SGPU_PREDICATE_TIME: Final = "metax-tech.com/predicate-time"
# ... and what users write.
USE_UUID: Final = "metax-tech.com/use-gpuuuid"
NOUSE_UUID: Final = "metax-tech.com/nouse-gpuuuid"
QOS_POLICY: Final = "metax-tech.com/sgpu-qos-policy"
TOPOLOGY_AWARE: Final = "metax-tech.com/sgpu-topology-aware"
APP_CLASS: Final = "metax-tech.com/sgpu-app-class"


@dataclass(frozen=True, slots=True)
class MetaxConfig:
    """HAMi's MetaxConfig, with the chart's defaults."""

    gpu: str = "metax-tech.com/gpu"  # resourceCountName
    sgpu: str = "metax-tech.com/sgpu"  # resourceVCountName
    vmemory: str = "metax-tech.com/vmemory"  # resourceVMemoryName
    vcore: str = "metax-tech.com/vcore"  # resourceVCoreName
    topology_aware: bool = False  # sgpuTopologyAware: score whole sGPU cards by MetaLink

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> "MetaxConfig":
        """The `metax:` section of device-config.yaml: the chart's defaults where there is
        no section; a name a given section leaves out names no resource, as in HAMi, which
        takes the section's values as they are. Raises ValueError for a value of the wrong
        kind."""
        if not section:
            return cls()
        names = {}
        for key, attr in (
            ("resourceCountName", "gpu"),
            ("resourceVCountName", "sgpu"),
            ("resourceVMemoryName", "vmemory"),
            ("resourceVCoreName", "vcore"),
        ):
            value = section.get(key) or ""
            if not isinstance(value, str):
                raise ValueError(f"metax.{key} must be a resource name, got {value!r}")
            names[attr] = value
        aware = section.get("sgpuTopologyAware") or False
        if not isinstance(aware, bool):
            raise ValueError(f"metax.sgpuTopologyAware must be true or false, got {aware!r}")
        return cls(topology_aware=aware, **names)


DEFAULT = MetaxConfig()
