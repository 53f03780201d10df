"""What would let a GPU pod out of its slice, or past the scheduler's count, checked at admission.

A GPU pod gets its cards from the device plugin, for the count a scheduler placed, and HAMi-core
holds each container to its slice. Each of these goes around that, so a GPU pod carrying one is
refused, whoever schedules it:

* `spec.nodeName` at creation: no scheduler places the pod, so none counts its cards;
* a privileged container, or one given a capability that reaches the driver or undoes the
  container's mounts (`ESCAPING_CAPABILITIES`): every card of the node;
* a hostPath volume that is, or holds, the driver's device nodes or the cards' PCI resources
  (`DEVICE_PATHS`);
* `NVIDIA_VISIBLE_DEVICES` (or the MIG config and monitor variables) naming any card: the NVIDIA
  container runtime exposes what the container's environment says, which overrides the device
  plugin's value in a GPU container and hands a GPU-less sidecar whatever it names; likewise a
  value read from elsewhere (`valueFrom`, `envFrom`), which admission cannot see;
* `NVIDIA_DRIVER_CAPABILITIES` beyond compute, utility and compat32: graphics, video and display
  reach the card through driver paths HAMi-core does not limit;
* a mount at the runtime's device-list folder (`/var/run/nvidia-container-devices`), its other
  way of being asked for cards, and `cdi.k8s.io/` annotations, which a CDI-enabled containerd
  turns into devices.

Every problem names the field and the fix. The checks are pure: the webhook runs them on what
the pod's author wrote, before any mutation of ours.
"""

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

# Capabilities that open the driver or the host to a container: mount and unmount (so the
# preloaded limits and the device cgroup setup can be undone), raw I/O and kernel modules.
ESCAPING_CAPABILITIES = frozenset({"ALL", "SYS_ADMIN", "SYS_RAWIO", "SYS_MODULE"})
# Host paths that are the cards: the driver's device nodes (`*` matches the rest of a name)
# and the PCI devices' config and memory (BAR) files. A hostPath at, above or below one of them
# is refused.
DEVICE_PATHS = ("/dev/nvidia*", "/dev/dri", "/sys/bus/pci", "/sys/devices")
# Variables the NVIDIA container runtime reads to decide which devices to expose.
DEVICE_VARIABLES = (
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_MIG_CONFIG_DEVICES",
    "NVIDIA_MIG_MONITOR_DEVICES",
)
NO_DEVICES = frozenset({"", "none", "void"})
CAPABILITIES_VARIABLE = "NVIDIA_DRIVER_CAPABILITIES"
SLICE_CAPABILITIES = frozenset({"compute", "utility", "compat32"})
WATCHED_VARIABLES = (*DEVICE_VARIABLES, CAPABILITIES_VARIABLE)
DEVICE_LIST_DIR = "/var/run/nvidia-container-devices"
CDI_PREFIX = "cdi.k8s.io/"
# Problems listed in one denial; a pod with more is refused with a count of the rest.
SHOWN = 5


def pod_escapes(pod: Mapping[str, Any], injected_config: str = "") -> list[str]:
    """Every way out of the slice in a GPU pod at creation. `injected_config` names the per-pod
    ConfigMap our standalone injection reads NVIDIA_VISIBLE_DEVICES from (a second admission
    pass sees our own first one): only that exact reference is let through."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    problems = []
    if spec.get("nodeName"):
        problems.append(
            f"spec.nodeName is set ({spec['nodeName']}): a pod that names its node bypasses "
            "every scheduler, so nobody counts the cards it takes; remove spec.nodeName "
            "(choose nodes with a nodeSelector or node affinity instead)"
        )
    problems.extend(
        f"annotation {key} asks the container runtime for devices ({value}); remove it, "
        "the GPU resources give the pod its cards"
        for key, value in sorted((meta.get("annotations") or {}).items())
        if key.startswith(CDI_PREFIX)
    )
    for i, volume in enumerate(spec.get("volumes") or ()):
        path = (volume.get("hostPath") or {}).get("path")
        if path is not None and reaches_devices(str(path)):
            problems.append(
                f"volume {volume.get('name')} (spec.volumes[{i}].hostPath.path {path}) reaches "
                "the GPUs' device files on the host; remove the hostPath volume"
            )
    for field, containers in (
        ("initContainers", spec.get("initContainers")),
        ("containers", spec.get("containers")),
        ("ephemeralContainers", spec.get("ephemeralContainers")),
    ):
        for i, container in enumerate(containers or ()):
            problems.extend(container_escapes(container, f"spec.{field}[{i}]", injected_config))
    return problems


def ephemeral_escapes(pod: Mapping[str, Any], old: Mapping[str, Any]) -> list[str]:
    """Every way out of the slice in the ephemeral containers a pods/ephemeralcontainers update
    adds to a GPU pod; they may mount the pod's volumes, so a hostPath one they mount counts."""
    spec = pod.get("spec") or {}
    before = {c.get("name") for c in (old.get("spec") or {}).get("ephemeralContainers") or ()}
    host_paths = {
        v.get("name"): str(v["hostPath"]["path"])
        for v in spec.get("volumes") or ()
        if (v.get("hostPath") or {}).get("path") is not None
    }
    problems = []
    for i, container in enumerate(spec.get("ephemeralContainers") or ()):
        if container.get("name") in before:
            continue
        where = f"spec.ephemeralContainers[{i}]"
        problems.extend(container_escapes(container, where, ""))
        for j, mount in enumerate(container.get("volumeMounts") or ()):
            path = host_paths.get(mount.get("name"))
            if path is not None and reaches_devices(path):
                problems.append(
                    f"container {container.get('name')} mounts volume {mount.get('name')} "
                    f"({where}.volumeMounts[{j}]), hostPath {path}, which reaches the GPUs' "
                    "device files; mount another volume"
                )
    return problems


def container_escapes(container: Mapping[str, Any], where: str, injected_config: str) -> list[str]:
    name = container.get("name")
    security = container.get("securityContext") or {}
    problems = []
    if security.get("privileged") is True:
        problems.append(
            f"container {name} is privileged ({where}.securityContext.privileged): it sees "
            "every GPU on the node; remove privileged: true"
        )
    added = [str(c) for c in (security.get("capabilities") or {}).get("add") or ()]
    escaping = [c for c in added if _capability(c) in ESCAPING_CAPABILITIES]
    if escaping:
        problems.append(
            f"container {name} adds {', '.join(escaping)} ({where}.securityContext.capabilities"
            ".add), which reaches the GPU driver past the container's limits; remove "
            f"{'it' if len(escaping) == 1 else 'them'}"
        )
    for j, env in enumerate(container.get("env") or ()):
        problem = _variable(env, f"{where}.env[{j}]", name, injected_config)
        if problem:
            problems.append(problem)
    for j, source in enumerate(container.get("envFrom") or ()):
        prefix = str(source.get("prefix") or "")
        if any(v.startswith(prefix) for v in WATCHED_VARIABLES):
            problems.append(
                f"container {name} takes variables from {_source(source)} ({where}.envFrom[{j}]"
                f"{'' if not prefix else f', prefix {prefix}'}), which could set "
                "NVIDIA_VISIBLE_DEVICES to widen the cards it sees; give it a "
                "prefix (envFrom[].prefix, e.g. APP_) or list the variables under env"
            )
    for j, mount in enumerate(container.get("volumeMounts") or ()):
        path = _normal(str(mount.get("mountPath") or ""))
        if _within(path, DEVICE_LIST_DIR) or _within(DEVICE_LIST_DIR, path):
            problems.append(
                f"container {name} mounts {path} ({where}.volumeMounts[{j}]), where the NVIDIA "
                "runtime reads which cards to expose; mount it elsewhere"
            )
    return problems


def _variable(env: Mapping[str, Any], where: str, name: object, injected_config: str) -> str:
    variable = env.get("name")
    if variable not in WATCHED_VARIABLES:
        return ""
    if env.get("valueFrom") is not None:
        if _injected(env, name, injected_config):
            return ""
        return (
            f"container {name} reads {variable} from elsewhere ({where}.valueFrom), a value "
            "admission cannot check; remove it (the device plugin sets the cards)"
        )
    value = str(env.get("value") or "")
    if variable == CAPABILITIES_VARIABLE:
        wide = sorted({c.strip() for c in value.split(",") if c.strip()} - SLICE_CAPABILITIES)
        if not wide:
            return ""
        return (
            f"container {name} sets {variable}={value} ({where}): {', '.join(wide)} reach the "
            "card past HAMi-core's limits; use compute, utility and compat32 only"
        )
    if value.strip().lower() in NO_DEVICES:
        return ""
    return (
        f"container {name} sets {variable}={value} ({where}): the NVIDIA runtime would expose "
        "those cards whatever the scheduler gave it; remove the variable (the device plugin "
        "sets it) or set it to none"
    )


def _injected(env: Mapping[str, Any], container: object, config: str) -> bool:
    """Our standalone injection's own reference to the pod's limits ConfigMap."""
    ref = (env.get("valueFrom") or {}).get("configMapKeyRef") or {}
    return (
        bool(config)
        and env.get("name") == "NVIDIA_VISIBLE_DEVICES"
        and len(env["valueFrom"]) == 1
        and ref.get("name") == config
        and ref.get("key") == f"{container}.NVIDIA_VISIBLE_DEVICES"
    )


def _source(source: Mapping[str, Any]) -> str:
    for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
        if isinstance(source.get(key), dict):
            return f"{kind} {source[key].get('name')}"
    return "a source"


def _capability(name: str) -> str:
    upper = name.strip().upper()
    return upper.removeprefix("CAP_")


def _normal(path: str) -> str:
    """The path as Linux resolves it, without following links: `//dev/./x/` is `/dev/x`."""
    normal = posixpath.normpath("/" + path.lstrip("/"))
    return "/" + normal.lstrip("/")


def _within(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or lies under it; `folder`'s last part may end in `*`."""
    head, _, last = folder.rpartition("/")
    if not last.endswith("*"):
        return path == folder or path.startswith(folder.rstrip("/") + "/")
    parent = path.removeprefix(head + "/").partition("/")[0]
    return path.startswith(head + "/") and parent.startswith(last[:-1])


def reaches_devices(host_path: str) -> bool:
    """Whether a hostPath at `host_path` exposes one of DEVICE_PATHS: it is one, holds one, or
    lies inside one."""
    path = _normal(host_path)
    return any(
        _within(path, device) or _within(device.rstrip("*"), path) for device in DEVICE_PATHS
    )


def refusal(problems: Sequence[str]) -> str:
    """One denial message for a pod's problems."""
    if len(problems) == 1:
        return f"GPU pod refused: {problems[0]}"
    text = " ".join(f"({i}) {p}." for i, p in enumerate(problems[:SHOWN], 1))
    if len(problems) > SHOWN:
        text += f" And {len(problems) - SHOWN} more."
    return f"GPU pod refused for {len(problems)} reasons: {text}"
