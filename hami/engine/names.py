"""Wire names shared with HAMi v2.10: annotation keys, labels and resource names.

They are constants rather than configuration because HAMi's device plugin and
monitor read exactly these keys; changing one breaks compatibility.
"""

from typing import Final

# Pod annotations the scheduler writes (HAMi pkg/util/types.go).
ASSIGNED_NODE: Final = "hami.io/vgpu-node"
ASSIGNED_TIME: Final = "hami.io/vgpu-time"
DEVICES_TO_ALLOCATE: Final = "hami.io/vgpu-devices-to-allocate"
DEVICES_ALLOCATED: Final = "hami.io/vgpu-devices-allocated"
BIND_PHASE: Final = "hami.io/bind-phase"
BIND_TIME: Final = "hami.io/bind-time"
MIG_ALLOCATIONS: Final = "hami.io/vgpu-mig-allocations"

# Scheduler-owned keys a user must never set at creation (forged allocations).
SCHEDULER_OWNED_PREFIXES: Final = ("hami.io/vgpu-devices-", "hami.io/bind-")
SCHEDULER_OWNED_KEYS: Final = (ASSIGNED_NODE, ASSIGNED_TIME, MIG_ALLOCATIONS)

# Pod annotations users set.
GPU_POLICY: Final = "hami.io/gpu-scheduler-policy"
NODE_POLICY: Final = "hami.io/node-scheduler-policy"
SCORING_WEIGHTS: Final = "hami.io/device-scoring-weights"
USE_GPUTYPE: Final = "nvidia.com/use-gputype"
NOUSE_GPUTYPE: Final = "nvidia.com/nouse-gputype"
USE_GPUUUID: Final = "nvidia.com/use-gpuuuid"
NOUSE_GPUUUID: Final = "nvidia.com/nouse-gpuuuid"
NUMA_BIND: Final = "nvidia.com/numa-bind"
VGPU_MODE: Final = "nvidia.com/vgpu-mode"

# Node annotations.
NODE_REGISTER: Final = "hami.io/node-nvidia-register"
NODE_LINK_SCORES: Final = "hami.io/node-nvidia-score"
NODE_LOCK: Final = "hami.io/mutex.lock"
DEVICE_CORDON: Final = "hami.io/device-cordon"

# Labels.
WEBHOOK_IGNORE_LABEL: Final = "hami.io/webhook"

# The vendor word written in allocation strings (never the card model).
NVIDIA: Final = "NVIDIA"

# Bind phases.
PHASE_ALLOCATING: Final = "allocating"
PHASE_SUCCESS: Final = "success"
PHASE_FAILED: Final = "failed"
