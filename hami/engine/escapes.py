"""What would let a GPU pod out of its slice, or past the scheduler's count, checked at admission.

A GPU pod gets its cards from the device plugin, for the count a scheduler placed, and HAMi-core
holds each container's processes to its slice as far as they let it (`hami.engine.coreenv`
says how far). What a mutation can close, the webhook closes
(`hami.engine.pins`); each of these it cannot, so a GPU pod carrying one is refused, whoever
schedules it:

* `spec.nodeName` at creation: no scheduler places the pod, so none counts its cards;
* `spec.hostPID`: every process of the node, other pods' GPU processes among them;
* a privileged container, or one given a capability that reaches the driver, the PCI devices,
  the container's own mounts or the host files behind them (`CAPABILITIES`);
* a mount that reaches the device nodes, or writes the PCI devices, the driver's or
  HAMi-core's libraries or the runtime's configuration, one in the runtime's device-list
  folder, and one of the pod's own where the node side mounts HAMi-core
  (`hami.engine.mountescapes`);
* `NVIDIA_VISIBLE_DEVICES` (or the MIG config and monitor variables) naming any card, or read
  from elsewhere (`valueFrom`): the NVIDIA runtime exposes what the container's environment
  says, over the device plugin's value;
* an `envFrom` without a prefix where no pin covers the variables it could set;
* `NVIDIA_DRIVER_CAPABILITIES` beyond compute, utility and compat32: graphics, video and
  display reach the card through driver paths HAMi-core does not limit;
* an IMEX channel or the NVSwitch nodes asked of the runtime, and in a GPU container the
  HAMi-core variables the node side writes (`hami.engine.coreenv`);
* annotations the runtime (CDI) or GKE's NRI device injector turn into devices.

The DRA claims a GPU pod names are judged beside these (`hami.engine.claims`), and an update
of a stored pod by the same checks (`hami.engine.admission.admit_update`).

Every problem names the field, what it reaches and a fix. The checks are pure: they judge what
the pod's author wrote, and read the pod as it will be stored (`stored`) only for the pins.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from hami.engine.coreenv import core_variable, toolkit_reach
from hami.engine.mountescapes import DEFAULT_RULES, Rules, mount_escapes
from hami.engine.pins import DRIVER_CAPABILITIES, IMEX_CHANNELS, NVSWITCH, VISIBLE_DEVICES
from hami.engine.requests import asks_gpu

# What each capability reaches, worded for a denial.
CAPABILITIES = {
    "ALL": "every capability, SYS_ADMIN and SYS_RAWIO among them",
    "SYS_ADMIN": (
        "mount and umount, which undo the read-only mounts of libvgpu.so and /etc/ld.so.preload "
        "that hold the container to its limits"
    ),
    "SYS_RAWIO": (
        "port I/O and /proc/bus/pci, which reach the PCI config space and memory (BARs) of every "
        "card on the node (RDMA needs IPC_LOCK, not SYS_RAWIO)"
    ),
    "SYS_MODULE": "loading kernel modules, the GPU driver's among them: the whole node",
    "DAC_READ_SEARCH": (
        "open_by_handle_at, which opens any file of a host filesystem the container has a "
        "mount from, outside the mounted folder, the driver's and HAMi-core's libraries and "
        "other pods' files among them"
    ),
}
DEVICE_VARIABLES = (VISIBLE_DEVICES, "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES")
NO_DEVICES = frozenset({"", "none", "void"})
SLICE_CAPABILITIES = frozenset({"compute", "utility", "compat32"})
WATCHED_VARIABLES = (*DEVICE_VARIABLES, DRIVER_CAPABILITIES, IMEX_CHANNELS, NVSWITCH)
# Annotation domains turned into devices: CDI's (`cdi.k8s.io/`, the GPU Operator's
# `nvidia.cdi.k8s.io/`, any other `*.cdi.k8s.io/` a runtime is set to read) and GKE's NRI
# device injector (`devices.gke.io/container.<name>`).
DEVICE_DOMAINS = {
    "cdi.k8s.io": "the container runtime (CDI)",
    "devices.gke.io": "GKE's NRI device injector",
}
# Problems listed in one denial; a pod with more is refused with a count of the rest.
SHOWN = 5
EXEMPT = "have an administrator exempt its namespace (label hami.io/webhook=ignore)"
ENV_FROM_FIX = (
    "list the variables the application needs under env instead, each with "
    f"valueFrom.configMapKeyRef or secretKeyRef (charts take these as extra env entries), or "
    f"{EXEMPT}"
)


def pod_escapes(
    pod: Mapping[str, Any],
    stored: Mapping[str, Any] | None = None,
    rules: Rules = DEFAULT_RULES,
    injected_config: str = "",
) -> list[str]:
    """Every way out of the slice in a GPU pod at creation. `stored` is the pod as admission
    will store it, pins included (the pod itself when nothing is written). `injected_config`
    names the per-pod ConfigMap our standalone injection reads NVIDIA_VISIBLE_DEVICES and the
    limits from (a second admission pass sees our own first one): only those exact entries, and
    the mounts it adds, are let through."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    stored_spec = (stored if stored is not None else pod).get("spec") or {}
    problems = []
    if spec.get("nodeName"):
        problems.append(
            f"spec.nodeName is set ({spec['nodeName']}): a pod that names its node bypasses "
            "every scheduler, so nobody counts the cards it takes; remove spec.nodeName "
            "(choose nodes with a nodeSelector or node affinity instead)"
        )
    if spec.get("hostPID") is True:
        problems.append(
            "spec.hostPID is true: the pod sees every process of the node, other pods' GPU "
            "processes among them, and with SYS_PTRACE (or as their user on nodes whose "
            "kernel.yama.ptrace_scope is 0) attaches to them and uses their cards and memory; "
            "remove hostPID (nvidia-smi then lists only the pod's own processes)"
        )
    for key, value in sorted((meta.get("annotations") or {}).items()):
        domain = key.partition("/")[0] if "/" in key else ""
        for known, who in DEVICE_DOMAINS.items():
            if domain == known or domain.endswith("." + known):
                problems.append(
                    f"annotation {key} asks {who} for devices ({str(value).strip()}), past the "
                    "device plugin and the scheduler's count; remove it (the GPU resource gives "
                    f"the pod its cards), or {EXEMPT} for a node-wide daemon that must see every "
                    "card"
                )
    volumes = {v.get("name"): v for v in spec.get("volumes") or ()}
    for field in ("initContainers", "containers", "ephemeralContainers"):
        stored_list = stored_spec.get(field) or ()
        for i, container in enumerate(spec.get(field) or ()):
            where = f"spec.{field}[{i}]"
            kept = stored_list[i] if i < len(stored_list) else container
            gpu = asks_gpu(kept, rules.names) or asks_gpu(container, rules.names)
            problems.extend(
                container_escapes(container, where, kept, injected_config, gpu, rules.core_policy)
            )
            problems.extend(mount_escapes(container, where, volumes, rules, gpu, injected_config))
    return problems


def ephemeral_escapes(
    pod: Mapping[str, Any],
    old: Mapping[str, Any],
    stored: Mapping[str, Any] | None = None,
    rules: Rules = DEFAULT_RULES,
) -> list[str]:
    """Every way out of the slice in the ephemeral containers a pods/ephemeralcontainers update
    adds to a GPU pod; they may mount the pod's volumes, judged as the pod's own containers'."""
    spec = pod.get("spec") or {}
    stored_list = ((stored if stored is not None else pod).get("spec") or {}).get(
        "ephemeralContainers"
    ) or ()
    before = {c.get("name") for c in (old.get("spec") or {}).get("ephemeralContainers") or ()}
    volumes = {v.get("name"): v for v in spec.get("volumes") or ()}
    problems = []
    for i, container in enumerate(spec.get("ephemeralContainers") or ()):
        if container.get("name") in before:
            continue
        where = f"spec.ephemeralContainers[{i}]"
        kept = stored_list[i] if i < len(stored_list) else container
        problems.extend(container_escapes(container, where, kept, ""))
        problems.extend(mount_escapes(container, where, volumes, rules))
    return problems


def container_escapes(
    container: Mapping[str, Any],
    where: str,
    stored: Mapping[str, Any] | None = None,
    injected_config: str = "",
    gpu: bool = False,
    core_policy: str = "default",
) -> list[str]:
    """A container's own ways out: its privileges, capabilities and environment. HAMi-core's
    variables are judged in GPU containers (`gpu`), against the scheduler's `core_policy`."""
    name = container.get("name")
    security = container.get("securityContext") or {}
    problems = []
    if security.get("privileged") is True:
        problems.append(
            f"container {name} is privileged ({where}.securityContext.privileged): it gets "
            "every device node of the node, every card's among them, and every capability; "
            f"remove privileged: true (the GPU resource gives it its cards; a daemon can add the "
            f"one capability it needs, e.g. NET_ADMIN), or {EXEMPT} for a node-wide daemon that "
            "must see every card"
        )
    for c in (security.get("capabilities") or {}).get("add") or ():
        reach = CAPABILITIES.get(str(c).strip().upper().removeprefix("CAP_"))
        if reach:
            problems.append(
                f"container {name} adds {c} ({where}.securityContext.capabilities.add): "
                f"{reach}; remove it"
            )
    for j, env in enumerate(container.get("env") or ()):
        problem = _variable(env, f"{where}.env[{j}]", name, injected_config)
        if not problem and gpu:
            problem = core_variable(env, f"{where}.env[{j}]", name, core_policy, injected_config)
        if problem:
            problems.append(problem)
    pinned = {
        str(e.get("name")): e
        for e in (stored if stored is not None else container).get("env") or ()
    }
    for j, source in enumerate(container.get("envFrom") or ()):
        prefix = str(source.get("prefix") or "")
        open_ = [v for v in _unpinned(pinned) if v.startswith(prefix)]
        if open_:
            problems.append(
                f"container {name} takes every variable of {_source(source)} ({where}.envFrom"
                f"[{j}]{'' if not prefix else f', prefix {prefix}'}) and nothing pins "
                f"{' or '.join(open_)} in it, so that source could set "
                f"{VISIBLE_DEVICES if VISIBLE_DEVICES in open_ else open_[0]} and reach cards "
                f"past its slice ({_why_open(open_)}); {ENV_FROM_FIX}"
            )
    return problems


def _unpinned(env: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The watched variables an envFrom could still set: those no env entry names. The MIG
    variables are left out: the NVIDIA runtime refuses to start an unprivileged container that
    sets them, and privileged ones are refused. Without a card only the NVSwitch nodes matter
    (the runtime adds them to a container asking for `none`)."""
    visible = env.get(VISIBLE_DEVICES)
    no_cards = visible is not None and str(visible.get("value") or "").lower() in NO_DEVICES
    if no_cards and visible is not None and visible.get("valueFrom") is None:
        return [v for v in (NVSWITCH,) if v not in env]
    return [
        v for v in (VISIBLE_DEVICES, DRIVER_CAPABILITIES, IMEX_CHANNELS, NVSWITCH) if v not in env
    ]


def _why_open(variables: Sequence[str]) -> str:
    if VISIBLE_DEVICES in variables:
        return (
            "the device plugin's value, which an envFrom key overrides, is not known at "
            "admission; with --node-integration standalone, or in a container without a GPU "
            "with --overwrite-env, the webhook pins it"
        )
    return "the webhook pins it only in the containers of GPU pods it admits"


def _variable(env: Mapping[str, Any], where: str, name: object, injected_config: str) -> str:
    variable = env.get("name")
    if variable not in WATCHED_VARIABLES:
        return ""
    if env.get("valueFrom") is not None:
        if _injected(env, name, injected_config):
            return ""
        return (
            f"container {name} reads {variable} from elsewhere ({where}.valueFrom), a value "
            "admission cannot see and the NVIDIA runtime follows over the device plugin's; "
            "remove it (the device plugin sets the cards)"
        )
    value = str(env.get("value") or "")
    if variable in (IMEX_CHANNELS, NVSWITCH):
        reach = toolkit_reach(variable, value)
        return f"container {name} sets {variable}={value} ({where}): {reach}" if reach else ""
    if variable == DRIVER_CAPABILITIES:
        wide = sorted({c.strip() for c in value.split(",") if c.strip()} - SLICE_CAPABILITIES)
        if not wide:
            return ""
        return (
            f"container {name} sets {variable}={value} ({where}): {', '.join(wide)} reach the "
            "card through driver paths HAMi-core does not limit (graphics and video memory, the "
            "video engines); remove the variable (the webhook sets compute,utility) or list "
            "compute, utility and compat32 only"
        )
    if value.strip().lower() in NO_DEVICES:
        return ""
    return (
        f"container {name} sets {variable}={value} ({where}): the NVIDIA runtime would expose "
        "the cards it names (every card of the node with all), whatever the scheduler gave "
        "the pod; remove the variable (the device plugin sets it) or set it to none"
    )


def _injected(env: Mapping[str, Any], container: object, config: str) -> bool:
    """Our standalone injection's own reference to the pod's limits ConfigMap."""
    ref = (env.get("valueFrom") or {}).get("configMapKeyRef") or {}
    return (
        bool(config)
        and env.get("name") == VISIBLE_DEVICES
        and len(env["valueFrom"]) == 1
        and ref.get("name") == config
        and ref.get("key") == f"{container}.{VISIBLE_DEVICES}"
    )


def _source(source: Mapping[str, Any]) -> str:
    for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
        if isinstance(source.get(key), dict):
            return f"{kind} {source[key].get('name')}"
    return "a source"


def refusal(problems: Sequence[str]) -> str:
    """One denial message for a pod's problems."""
    if len(problems) == 1:
        return f"GPU pod refused: {problems[0]}"
    text = " ".join(f"({i}) {p}." for i, p in enumerate(problems[:SHOWN], 1))
    if len(problems) > SHOWN:
        text += f" And {len(problems) - SHOWN} more."
    return f"GPU pod refused for {len(problems)} reasons: {text}"
