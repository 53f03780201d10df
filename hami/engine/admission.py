"""Which pods are ours and what admission changes on them (HAMi v2.10's webhook rules).

`admit` takes a pod and returns the pod as it should be stored, or a denial
whose message names the fix. It is pure: the webhook adapter diffs the result
into a JSONPatch, and `hami simulate` runs the very same function.
"""

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hami.engine import kai, names
from hami.engine.escapes import ephemeral_escapes, pod_escapes, refusal
from hami.engine.injection import CONFIG_ANNOTATION, InjectionConfig, inject
from hami.engine.policy import Defaults, PolicyError, pod_options
from hami.engine.quantity import QuantityError, as_int64
from hami.engine.requests import RequestError, ResourceDefaults, names_gpu, pod_request

DEFAULT_SCHEDULER = "default-scheduler"


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    scheduler_name: str = "hami-scheduler"
    force_overwrite_default_scheduler: bool = True
    resources: ResourceDefaults = ResourceDefaults()
    policies: Defaults = Defaults()
    gpu_core_policy: str = "default"  # default | force | disable
    runtime_class_name: str = ""
    overwrite_env: bool = False  # NVIDIA_VISIBLE_DEVICES=none on GPU-less containers
    injection: InjectionConfig = InjectionConfig()
    # Schedulers whose pods are taken over when they ask for a KAI GPU share.
    adopt_schedulers: tuple[str, ...] = ("kai-scheduler",)


@dataclass(frozen=True, slots=True)
class Admission:
    allowed: bool
    pod: dict[str, Any] = field(default_factory=dict)  # the pod to store (when allowed)
    message: str = ""
    code: int = 200  # 403 denied, 400 undecodable


def _deny(message: str) -> Admission:
    return Admission(False, {}, message, 403)


def _set_env(container: dict[str, Any], name: str, value: str) -> None:
    env = container.setdefault("env", [])
    if not any(e.get("name") == name for e in env):
        env.append({"name": name, "value": value})


def _has(resources: Mapping[str, Any], name: str, sections: tuple[str, ...]) -> bool:
    return any(name in (resources.get(s) or {}) for s in sections)


def _mutate_container(container: dict[str, Any], cfg: AdmissionConfig) -> bool:
    """HAMi's per-container mutation; True when the container asks for a GPU."""
    r = cfg.resources.names
    cname = container.get("name", "?")
    created = "resources" not in container
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    pct = limits.get(
        r.memory_percentage, (resources.get("requests") or {}).get(r.memory_percentage)
    )
    pct_value: int | None = None
    if pct is not None:
        try:
            pct_value = as_int64(pct)
        except QuantityError:
            pct_value = None
        if pct_value is None or not 0 <= pct_value <= 100:
            raise RequestError(
                f"invalid {r.memory_percentage} value {pct} in container {cname}: "
                "must be an integer between 0 and 100"
            )
    if r.priority in limits:
        _set_env(container, "CUDA_TASK_PRIORITY", str(limits[r.priority]))
    if cfg.gpu_core_policy not in ("", "default"):
        _set_env(container, "GPU_CORE_UTILIZATION_POLICY", cfg.gpu_core_policy)

    # A count under requests counts too: the cores default below writes limits, and a second
    # pass must not then take the container for one without a count.
    has_gpu = _has(resources, r.gpu, ("limits", "requests"))
    if (
        not has_gpu
        and cfg.resources.default_gpu_num > 0
        and any(k in limits for k in (r.cores, r.memory, r.memory_percentage))
    ):
        resources.setdefault("limits", {})[r.gpu] = cfg.resources.default_gpu_num
        has_gpu = True
    if has_gpu and not _has(resources, r.cores, ("limits", "requests")):
        # A container that takes a card's whole memory cannot share its cores either.
        exclusive_memory = pct_value == 100 or (
            pct is None and not _has(resources, r.memory, ("limits", "requests"))
        )
        if exclusive_memory:
            resources.setdefault("limits", {})[r.cores] = "100"
    if not has_gpu and cfg.overwrite_env:
        _set_env(container, "NVIDIA_VISIBLE_DEVICES", "none")
    if created and not resources:
        del container["resources"]
    return has_gpu


def forged_annotations(annotations: Mapping[str, str]) -> list[str]:
    """Scheduler-owned keys present at creation: only the scheduler may write them."""
    return sorted(
        k
        for k in annotations
        if k in names.SCHEDULER_OWNED_KEYS or k.startswith(names.SCHEDULER_OWNED_PREFIXES)
    )


def _config_name(pod: Mapping[str, Any], fallback: str) -> str:
    meta = pod.get("metadata") or {}
    existing = (meta.get("annotations") or {}).get(CONFIG_ANNOTATION)
    if existing:
        return str(existing)
    return f"{meta['name']}-hami-vgpu"[:253] if meta.get("name") else fallback


def _drop_null(obj: dict[str, Any], key: str) -> None:
    if key in obj and obj[key] is None:
        del obj[key]


def _drop_nulls(pod: dict[str, Any], containers: list[dict[str, Any]]) -> None:
    """Remove the JSON nulls where admission writes: the API server reads null as absent, and
    with them gone every mutation may setdefault (kube-apiserver itself never sends them)."""
    _drop_null(pod, "metadata")
    _drop_null(pod.get("metadata") or {}, "annotations")
    _drop_null(pod["spec"], "volumes")
    for c in containers:
        for key in ("resources", "env", "volumeMounts"):
            _drop_null(c, key)
        _drop_null(c.get("resources") or {}, "limits")
        for e in c.get("env") or ():
            _drop_null(e, "value")


def admit(
    pod: Mapping[str, Any], cfg: AdmissionConfig, config_name: str = "hami-vgpu"
) -> Admission:
    """Decide on a pod at creation. `config_name` names the per-pod limits object of a pod
    created without a name (generateName): the caller derives it from the request."""
    spec = pod.get("spec")
    if not isinstance(spec, dict) or not spec.get("containers"):
        return _deny("pod has no containers")
    meta = pod.get("metadata") or {}
    # The label spares a pod the mutation, never the denials: a pod author sets it, and the
    # denials protect the scheduler's state and the node (namespaces are an administrator's
    # switch, and those kube-apiserver never sends us).
    ignored = (meta.get("labels") or {}).get(names.WEBHOOK_IGNORE_LABEL) == "ignore"
    annotations_in = meta.get("annotations") or {}
    # Checked for every pod, whoever schedules it: the cache counts any pod carrying an
    # allocation, so a forged one could fence off cards it never uses.
    forged = forged_annotations(annotations_in)
    if forged:
        return _deny(
            f"annotations {', '.join(forged)} are written by the scheduler only; "
            "remove them from the pod"
        )
    scheduler = spec.get("schedulerName") or ""
    adopt = scheduler in cfg.adopt_schedulers and kai.wants_kai_sharing(annotations_in)
    ours = (
        not scheduler
        or scheduler == cfg.scheduler_name
        or adopt
        or (scheduler == DEFAULT_SCHEDULER and cfg.force_overwrite_default_scheduler)
    )
    # Every GPU pod, whoever places it: its cards come from the same device plugin, and a pod
    # that slips out of its slice or past the scheduler's count over-commits the node.
    if adopt or names_gpu(spec, cfg.resources.names):
        injected = ""
        if ours and not ignored and cfg.injection.mode == "standalone":
            injected = _config_name(pod, config_name)
        problems = pod_escapes(pod, injected)
        if problems:
            return _deny(refusal(problems))
    if not ours:
        return Admission(True, dict(pod), "pod already has different scheduler assigned")

    out = copy.deepcopy(dict(pod))
    out_spec = out["spec"]
    containers = [*(out_spec.get("initContainers") or ()), *out_spec["containers"]]
    _drop_nulls(out, containers)
    out.setdefault("metadata", {})
    try:
        kai.translate(out, cfg.resources.names)
        gpu = [_mutate_container(c, cfg) for c in containers]
        request = pod_request(out_spec, cfg.resources, strict=True) if any(gpu) else None
    except (RequestError, QuantityError) as e:
        return _deny(str(e))
    if request is None:
        return Admission(True, dict(pod) if ignored else out)
    if ignored and scheduler != cfg.scheduler_name:
        # Left to the scheduler it names: our policies are not its to follow.
        return Admission(True, dict(pod), "pod is labelled hami.io/webhook=ignore")
    annotations = out["metadata"].get("annotations") or {}
    try:
        pod_options(annotations, cfg.policies)
    except PolicyError as e:
        return _deny(str(e))
    if ignored:
        return Admission(True, dict(pod), "pod is labelled hami.io/webhook=ignore")
    out_spec["schedulerName"] = cfg.scheduler_name
    if cfg.runtime_class_name and not out_spec.get("runtimeClassName"):
        out_spec["runtimeClassName"] = cfg.runtime_class_name
    asks = [*request.init, *request.app]
    wanted = [(c, r.nums) for c, r in zip(containers, asks, strict=True) if r is not None]
    inject(
        out,
        cfg.injection,
        [c for c, _ in wanted],
        [n for _, n in wanted],
        _config_name(out, config_name),
    )
    return Admission(True, out)


def admit_ephemeral(
    pod: Mapping[str, Any], old: Mapping[str, Any], cfg: AdmissionConfig
) -> Admission:
    """Decide on ephemeral containers added to a running pod (kubectl debug): a GPU pod's new
    ones are held to the same checks as its own containers. Nothing is mutated."""
    spec = pod.get("spec") or {}
    if names_gpu(spec, cfg.resources.names):
        problems = ephemeral_escapes(pod, old)
        if problems:
            return _deny(refusal(problems))
    return Admission(True, dict(pod))
