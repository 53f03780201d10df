"""What a GPU pod's environment may say to the NVIDIA runtime's optional devices and to HAMi-core.

The NVIDIA Container Toolkit reads more than NVIDIA_VISIBLE_DEVICES from a container's
environment before the container starts, on the same terms (unprivileged containers included
unless the node turns `accept-nvidia-visible-devices-envvar-when-unprivileged` off):

* `NVIDIA_IMEX_CHANNELS` adds `/dev/nvidia-caps-imex-channels/channel<N>` for each channel
  named: through one a card imports the GPU memory another compute domain exported over
  multi-node NVLink. Refused unless empty, `none` or `void`, like NVIDIA_VISIBLE_DEVICES (the
  toolkit ignores `all` today, older ones did not). A ComputeDomain claim gives a pod its own
  domain's channel; that goes through DRA, never this variable.
* `NVIDIA_NVSWITCH=enabled` adds the NVSwitch device nodes, the fabric manager's interface to
  the switches every card of the node shares: refused.
* `NVIDIA_GDS`, `NVIDIA_MOFED` and `NVIDIA_GDRCOPY` (`enabled`) add the GPUDirect Storage,
  RDMA and gdrcopy device nodes: each moves data to and from GPU memory the process already
  holds through its own card (and HAMi-core counts), so they reach no other card: harmless.

HAMi-core, preloaded into every process of a GPU container, reads its limits from the process's
own environment when CUDA starts. So what the pod's spec says is only part of it: the image's
ENV and the container's own command (`env CUDA_DEVICE_SM_LIMIT=100 python ...`) set the same
variables, and admission sees neither. No pin holds a process to a value it may change itself;
the card the device plugin gives a container is a hard boundary, the slice inside it is as
strong as the process's cooperation. What the spec says is still judged, so that a pod never
states a way out, and a copied or mistaken value fails at creation, not on a busy card:

* the limits (`CUDA_DEVICE_MEMORY_LIMIT`, `CUDA_DEVICE_SM_LIMIT`, each also per device with
  `_<i>`), the shared usage file (`CUDA_DEVICE_MEMORY_SHARED_CACHE`: a process with a file of
  its own is counted alone) and `CUDA_REDIRECT` (the library HAMi-core resolves CUDA through):
  the node side's to write, refused (standalone injection's own entries excepted);
* `CUDA_DISABLE_CONTROL` true: HAMi's device plugin reads it from the spec (not the process)
  and then leaves HAMi-core out of the container: refused, in both node integrations;
* `GPU_CORE_UTILIZATION_POLICY`: refused where it limits less than the scheduler's policy
  (`force` > `default` > `disable`, as `--gpu-core-policy` sets it);
* `CUDA_TASK_PRIORITY` (the choice `nvidia.com/priority` already gives), `ACTIVE_OOM_KILLER`
  (read, never acted on), `RECORD_KERNEL_INTERVAL`, `LIBCUDA_LOG_LEVEL`, `CUDA_VISIBLE_DEVICES`
  (orders the container's own cards), `CUDA_OVERSUBSCRIBE` (not read by HAMi-core) and
  `LD_PRELOAD` (HAMi-core comes from /etc/ld.so.preload whatever it says): admitted.
"""

from collections.abc import Mapping
from typing import Any

from hami.engine.injection import SHARED_CACHE_FILE
from hami.engine.pins import IMEX_CHANNELS, NVSWITCH

LIMITS = ("CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT")
SHARED_CACHE = "CUDA_DEVICE_MEMORY_SHARED_CACHE"
REDIRECT = "CUDA_REDIRECT"
DISABLE_CONTROL = "CUDA_DISABLE_CONTROL"
CORE_POLICY = "GPU_CORE_UTILIZATION_POLICY"
# Go's strconv.ParseBool, which HAMi's device plugin reads CUDA_DISABLE_CONTROL with.
TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})
# How much each core policy limits, as HAMi-core reads the value: force or FORCE, disable or
# DISABLE, anything else the default.
POLICY_LEVEL = {"force": 2, "FORCE": 2, "default": 1, "disable": 0, "DISABLE": 0}
NODE_SIDE = "remove it (the node side sets it for the card the scheduler chose)"


def toolkit_reach(variable: str, value: str) -> str:
    """What a toolkit variable other than the card list reaches with `value`, or "" where it
    reaches nothing."""
    if variable == IMEX_CHANNELS and value.strip() not in ("", "none", "void"):
        return (
            "the NVIDIA runtime would add the IMEX channels it names, through which a card "
            "imports the GPU memory another compute domain exported over multi-node NVLink; "
            "remove the variable (a ComputeDomain claim gives a pod its own domain's channel)"
        )
    if variable == NVSWITCH and value == "enabled":
        return (
            "the NVIDIA runtime would add the NVSwitch device nodes, the fabric manager's "
            "interface to the switches every card of the node shares; remove the variable"
        )
    return ""


def core_variable(
    env: Mapping[str, Any], where: str, container: object, policy: str, config: str
) -> str:
    """What an env entry of a GPU container says to HAMi-core that takes the container past its
    slice, or "". `config` names standalone injection's limits ConfigMap (a second admission
    pass sees our own first one), "" under HAMi's device plugin."""
    variable = str(env.get("name") or "")
    value = str(env.get("value") or "")
    base = variable.rstrip("0123456789").removesuffix("_") if variable[-1:].isdigit() else variable
    if base in LIMITS or variable in (SHARED_CACHE, REDIRECT):
        if _injected(env, container, variable, config):
            return ""
        what = {
            SHARED_CACHE: "the usage file HAMi-core shares between the container's processes "
            "(a process with a file of its own is counted alone)",
            REDIRECT: "the library HAMi-core resolves CUDA through (the real one bypasses it)",
        }.get(variable, "a limit HAMi-core holds the card's slice to")
        return f"container {container} sets {variable} ({where}), {what}; {NODE_SIDE}"
    if variable == DISABLE_CONTROL and value in TRUE:
        return (
            f"container {container} sets {variable}={value} ({where}): HAMi's device plugin "
            "then leaves HAMi-core out of the container and the card has no memory or core "
            "limit; remove it"
        )
    if variable == CORE_POLICY:
        asked = POLICY_LEVEL.get(value, POLICY_LEVEL["default"])
        if asked < POLICY_LEVEL.get(policy, POLICY_LEVEL["default"]):
            return (
                f"container {container} sets {variable}={value} ({where}), which limits its "
                f"cores less than the scheduler's policy ({policy}); remove it"
            )
    return ""


def _injected(env: Mapping[str, Any], container: object, variable: str, config: str) -> bool:
    """Standalone injection's own entry: the usage file it mounts, or a reference to the key of
    the pod's limits ConfigMap that bind fills for this container and variable."""
    if not config:
        return False
    if variable == SHARED_CACHE:
        return env.get("valueFrom") is None and env.get("value") == SHARED_CACHE_FILE
    ref = (env.get("valueFrom") or {}).get("configMapKeyRef") or {}
    return (
        len(env.get("valueFrom") or {}) == 1
        and ref.get("name") == config
        and ref.get("key") == f"{container}.{variable}"
    )
