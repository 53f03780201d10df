"""Environment entries the webhook writes into every GPU pod to close what a refusal cannot see.

The kubelet hands a container the device plugin's variables first, then the pod's (`envFrom`,
then `env`), and the runtime keeps the last value: an `env` entry beats every `envFrom` key,
the device plugin's value and the image's `ENV`. So an explicit entry pins a variable whatever
a ConfigMap, a Secret or the image says:

* `NVIDIA_VISIBLE_DEVICES=none` in each container that asks for no GPU (HAMi's overwriteEnv,
  `--overwrite-env`): a sidecar on a CUDA base image, whose `ENV NVIDIA_VISIBLE_DEVICES=all`
  admission cannot see, gets no card.
* `NVIDIA_DRIVER_CAPABILITIES=compute,utility` in each GPU container: the driver paths that
  HAMi-core limits, whatever the image asks for (`all`, `graphics`, `video`).
* `NVIDIA_IMEX_CHANNELS=void` in each GPU container: no IMEX channel, through which its card
  would import another compute domain's GPU memory (`hami.engine.coreenv`); a GPU-less one
  has no card to import with.
* `NVIDIA_NVSWITCH=disabled` in each container that gets either pin above: the runtime adds the
  NVSwitch device nodes to any container it hands devices to, `none` included.

An entry the pod's author wrote is kept (the checks have judged it); the GPU containers'
`NVIDIA_VISIBLE_DEVICES` stays the device plugin's, or standalone injection's reference.
"""

from collections.abc import Mapping, Sequence
from typing import Any

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"
IMEX_CHANNELS = "NVIDIA_IMEX_CHANNELS"
NVSWITCH = "NVIDIA_NVSWITCH"
NO_CARDS = "none"
SLICE_CAPABILITIES = "compute,utility"
NO_CHANNELS = "void"  # "none" would ask the runtime for a channel with an empty name
NO_SWITCHES = "disabled"  # anything but "enabled"


def set_env(container: dict[str, Any], name: str, value: str) -> None:
    """Add `name=value` unless the container already lists the variable."""
    env = container.get("env") or []
    container["env"] = env
    if not any(e.get("name") == name for e in env):
        env.append({"name": name, "value": value})


def pin(containers: Sequence[dict[str, Any]], gpu: Sequence[bool], overwrite_env: bool) -> None:
    """Pin the variables of a GPU pod's init and app containers (`gpu[i]`: container i asks
    for a GPU), in place."""
    for container, has_gpu in zip(containers, gpu, strict=True):
        if has_gpu:
            set_env(container, DRIVER_CAPABILITIES, SLICE_CAPABILITIES)
            set_env(container, IMEX_CHANNELS, NO_CHANNELS)
        elif overwrite_env:
            set_env(container, VISIBLE_DEVICES, NO_CARDS)
        else:
            continue
        set_env(container, NVSWITCH, NO_SWITCHES)


def pin_ephemeral(pod: dict[str, Any], old: Mapping[str, Any], overwrite_env: bool) -> None:
    """Pin the ephemeral containers a `kubectl debug` adds to a GPU pod: none asks for a GPU."""
    before = {c.get("name") for c in (old.get("spec") or {}).get("ephemeralContainers") or ()}
    added = [c for c in pod["spec"].get("ephemeralContainers") or () if c.get("name") not in before]
    pin(added, [False] * len(added), overwrite_env)
