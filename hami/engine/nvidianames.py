"""NVIDIA's wire names (HAMi v2.10's pkg/device/nvidia and the keys its device plugin reads).

The NVIDIA family's home is hami.engine.families.nvidia, whose FamilyWire is built from these.
They sit in this leaf module instead because the engine modules that implement NVIDIA (the
model, codec, requests, policy, inventory) are imported by hami.engine.families, so they may
not import from it (scripts/check_layers.py: no import cycle between the engine's modules).
Nothing outside this module, the NVIDIA family and the registry writes these strings.
"""

from typing import Final

# The request Type and the vendor word written in allocation strings (never the card model).
NVIDIA: Final = "NVIDIA"

# Resources (HAMi's chart defaults, device-config.yaml `nvidia:`).
GPU: Final = "nvidia.com/gpu"
GPUMEM: Final = "nvidia.com/gpumem"
GPUMEM_PERCENTAGE: Final = "nvidia.com/gpumem-percentage"
GPUCORES: Final = "nvidia.com/gpucores"
PRIORITY: Final = "nvidia.com/priority"

# Pod annotations the scheduler writes for NVIDIA's device plugin (HAMi pkg/util/types.go).
DEVICES_TO_ALLOCATE: Final = "hami.io/vgpu-devices-to-allocate"
DEVICES_ALLOCATED: Final = "hami.io/vgpu-devices-allocated"
MIG_ALLOCATIONS: Final = "hami.io/vgpu-mig-allocations"

# Pod annotations users set.
USE_GPUTYPE: Final = "nvidia.com/use-gputype"
NOUSE_GPUTYPE: Final = "nvidia.com/nouse-gputype"
USE_GPUUUID: Final = "nvidia.com/use-gpuuuid"
NOUSE_GPUUUID: Final = "nvidia.com/nouse-gpuuuid"
NUMA_BIND: Final = "nvidia.com/numa-bind"
VGPU_MODE: Final = "nvidia.com/vgpu-mode"

# Node annotations NVIDIA's device plugin writes.
NODE_REGISTER: Final = "hami.io/node-nvidia-register"
NODE_HANDSHAKE: Final = "hami.io/node-handshake"
NODE_LINK_SCORES: Final = "hami.io/node-nvidia-score"

# The DRA drivers publishing NVIDIA's cards: HAMi-DRA's (hami-core over NVIDIA's kubelet
# plugin) and NVIDIA's own.
HAMI_DRA_DRIVER: Final = "hami-core-gpu.project-hami.io"
DRA_DRIVERS: Final = (HAMI_DRA_DRIVER, "gpu.nvidia.com")
