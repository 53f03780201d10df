"""HAMi v2.10's wire names every device family shares: bind bookkeeping, policies, labels.

They are constants rather than configuration because HAMi's device plugins and monitor read
exactly these keys; changing one breaks compatibility. A family's own names (its resources,
registration, allocation and selection annotations) live in that family's module: NVIDIA's in
hami.engine.nvidianames.
"""

from typing import Final

from hami.engine.nvidianames import MIG_ALLOCATIONS

# Pod annotations the scheduler writes (HAMi pkg/util/types.go).
ASSIGNED_NODE: Final = "hami.io/vgpu-node"
ASSIGNED_TIME: Final = "hami.io/vgpu-time"
BIND_PHASE: Final = "hami.io/bind-phase"
BIND_TIME: Final = "hami.io/bind-time"

# Scheduler-owned keys a user must never set at creation (forged allocations). The prefix
# covers NVIDIA's allocation annotations and any later `hami.io/vgpu-devices-*` HAMi adds;
# the other families' are listed from the registry (hami.engine.familyadmit).
SCHEDULER_OWNED_PREFIXES: Final = ("hami.io/vgpu-devices-", "hami.io/bind-")
SCHEDULER_OWNED_KEYS: Final = (ASSIGNED_NODE, ASSIGNED_TIME, MIG_ALLOCATIONS)

# Pod annotations users set.
GPU_POLICY: Final = "hami.io/gpu-scheduler-policy"
NODE_POLICY: Final = "hami.io/node-scheduler-policy"
SCORING_WEIGHTS: Final = "hami.io/device-scoring-weights"

# Node annotations.
NODE_LOCK: Final = "hami.io/mutex.lock"
DEVICE_CORDON: Final = "hami.io/device-cordon"

# Labels.
WEBHOOK_IGNORE_LABEL: Final = "hami.io/webhook"

# Bind phases.
PHASE_ALLOCATING: Final = "allocating"
PHASE_SUCCESS: Final = "success"
PHASE_FAILED: Final = "failed"
