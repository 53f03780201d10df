"""Which pods are ours and what admission changes on them (HAMi v2.10's webhook rules).

`admit` takes a pod and returns the pod as it should be stored, or a denial
whose message names the fix. It is pure: the webhook adapter diffs the result
into a JSONPatch, and `hami simulate` runs the very same function.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hami.engine import kai, names
from hami.engine.claims import GPU_DEVICE_CLASSES, NO_CLAIMS, ClaimSources, claim_escapes
from hami.engine.escapes import ephemeral_escapes, pod_escapes, refusal
from hami.engine.families.nvidia.family import NvidiaFamily
from hami.engine.families.registry import Families
from hami.engine.familyadmit import claim_families, family_owned_keys
from hami.engine.familyescapes import family_escapes
from hami.engine.hostpaths import host_folders
from hami.engine.injection import CONFIG_ANNOTATION, InjectionConfig, inject
from hami.engine.jsonpatch import copy_json
from hami.engine.mountescapes import Rules
from hami.engine.nvidianames import NVIDIA
from hami.engine.pins import pin, pin_ephemeral, set_env
from hami.engine.policy import Defaults, PolicyError, pod_options
from hami.engine.quantity import QuantityError
from hami.engine.requests import (
    RequestError,
    ResourceDefaults,
    asks_gpu,
    names_gpu,
    pod_request,
)

DEFAULT_SCHEDULER = "default-scheduler"


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    scheduler_name: str = "hami-scheduler"
    force_overwrite_default_scheduler: bool = True
    resources: ResourceDefaults = ResourceDefaults()
    policies: Defaults = Defaults()
    gpu_core_policy: str = "default"  # default | force | disable
    runtime_class_name: str = ""
    # NVIDIA_VISIBLE_DEVICES=none on the GPU-less containers of GPU pods (hami.engine.pins).
    overwrite_env: bool = True
    injection: InjectionConfig = InjectionConfig()
    # Schedulers whose pods are taken over when they ask for a KAI GPU share.
    adopt_schedulers: tuple[str, ...] = ("kai-scheduler",)
    # The device families, as the process's device config names their resources: required
    # (a config that forgot them would take every family's pods).
    families: Families = field(kw_only=True)
    # DeviceClasses whose claims hand out GPUs (hami.engine.claims).
    gpu_device_classes: tuple[str, ...] = GPU_DEVICE_CLASSES

    def __post_init__(self) -> None:
        """NVIDIA's containers are claimed by the families' NVIDIA member: it must read the
        names and core policy the rest of admission reads."""
        nvidia = self.families.by_type().get(NVIDIA)
        if not (
            isinstance(nvidia, NvidiaFamily)
            and nvidia.defaults == self.resources
            and nvidia.gpu_core_policy == self.gpu_core_policy
        ):
            raise ValueError(
                "the families' NVIDIA member must be built with the admission's resources and "
                "core policy (Families.replacing, as hami.runtime.choices does)"
            )


@dataclass(frozen=True, slots=True)
class Admission:
    allowed: bool
    pod: dict[str, Any] = field(default_factory=dict)  # the pod to store (when allowed)
    message: str = ""
    code: int = 200  # 403 denied, 400 undecodable


def _deny(message: str) -> Admission:
    return Admission(False, {}, message, 403)


def _mutate_container(
    container: dict[str, Any], pod: Mapping[str, Any], cfg: AdmissionConfig
) -> bool:
    """HAMi's per-container mutation (the NVIDIA member's claim); True when the container asks
    for a GPU."""
    claim = cfg.families.by_type()[NVIDIA].claim(container, pod)
    if claim.error:
        raise RequestError(claim.error)
    for name, value in claim.env:
        set_env(container, name, value)
    if claim.limits:
        container.setdefault("resources", {}).setdefault("limits", {}).update(claim.limits)
    return claim.claimed


def forged_annotations(annotations: Mapping[str, str], families: Families) -> list[str]:
    """Scheduler-owned keys present at creation: only the scheduler may write them (the
    other families' allocation annotations among them)."""
    theirs = family_owned_keys(families)
    return sorted(
        k
        for k in annotations
        if k in names.SCHEDULER_OWNED_KEYS
        or k.startswith(names.SCHEDULER_OWNED_PREFIXES)
        or k in theirs
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


def _gpu_flags(containers: list[dict[str, Any]], cfg: AdmissionConfig) -> list[bool]:
    return [asks_gpu(c, cfg.resources.names) for c in containers]


def _pinned(pod: Mapping[str, Any], cfg: AdmissionConfig, translate: bool) -> dict[str, Any]:
    """A GPU pod left otherwise as written, with the pins (hami.engine.pins). `translate`: KAI
    gives its GPU-share container a card, so that one is a GPU container."""
    stored = copy_json(dict(pod))
    containers = [*(stored["spec"].get("initContainers") or ()), *stored["spec"]["containers"]]
    _drop_nulls(stored, containers)
    probe = copy_json(stored)
    if translate:
        probe.setdefault("metadata", {})
        kai.translate(probe, cfg.resources.names)
    probe_spec = probe["spec"]
    gpu = _gpu_flags([*(probe_spec.get("initContainers") or ()), *probe_spec["containers"]], cfg)
    pin(containers, gpu, cfg.overwrite_env)
    return stored


def _rules(cfg: AdmissionConfig) -> Rules:
    return Rules(
        folders=host_folders(cfg.injection.driver.host_lib, cfg.injection.hook_path),
        names=cfg.resources.names,
        core_policy=cfg.gpu_core_policy,
        hook_path=cfg.injection.hook_path,
    )


def _escapes(
    pod: Mapping[str, Any],
    stored: Mapping[str, Any],
    cfg: AdmissionConfig,
    injected: str,
    claims: ClaimSources,
) -> list[str]:
    """Every way out of a GPU pod: what its author wrote, read against what is stored
    (`stored`, pins included), and the DRA claims it names (`claims`, as read)."""
    return (
        pod_escapes(pod, stored, _rules(cfg), injected)
        + claim_escapes(pod.get("spec") or {}, claims, cfg.gpu_device_classes)
        + family_escapes(pod, cfg.families)
    )


def _leave(
    pod: Mapping[str, Any],
    stored: dict[str, Any],
    cfg: AdmissionConfig,
    claims: ClaimSources,
    injected: str = "",
    message: str = "",
) -> Admission:
    """The one way out for a GPU pod, whatever made it one."""
    problems = _escapes(pod, stored, cfg, injected, claims)
    if problems:
        return _deny(refusal(problems))
    return Admission(True, stored, message)


FOREIGN = "pod already has different scheduler assigned"
IGNORED = "pod is labelled hami.io/webhook=ignore"


def admit(
    pod: Mapping[str, Any],
    cfg: AdmissionConfig,
    config_name: str = "hami-vgpu",
    claims: ClaimSources = NO_CLAIMS,
) -> Admission:
    """Decide on a pod at creation. `config_name` names the per-pod limits object of a pod
    created without a name (generateName): the caller derives it from the request. `claims`
    holds the DRA claims and templates the pod names, as the caller read them.

    Every pod that leaves as a GPU pod (a GPU resource, a translated KAI share) goes through
    `_leave`, whoever schedules it, whatever its labels."""
    spec = pod.get("spec")
    if not isinstance(spec, dict) or not spec.get("containers"):
        return _deny("pod has no containers")
    meta = pod.get("metadata") or {}
    # The label spares a pod the scheduling mutation, never the checks or the pins: a pod
    # author sets it, and they protect the scheduler's state and the node (namespaces are an
    # administrator's switch, and those kube-apiserver never sends us).
    ignored = (meta.get("labels") or {}).get(names.WEBHOOK_IGNORE_LABEL) == "ignore"
    annotations_in = meta.get("annotations") or {}
    # Checked for every pod, whoever schedules it: the cache counts any pod carrying an
    # allocation, so a forged one could fence off cards it never uses.
    forged = forged_annotations(annotations_in, cfg.families)
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
    # Its cards come from the same device plugin, so a GPU pod of another scheduler is held
    # to the same checks.
    gpu_in = adopt or names_gpu(spec, cfg.resources.names)
    if not gpu_in:
        # A pod asking only other families: their own ways out (NVIDIA's are judged on pods
        # asking NVIDIA's cards), whoever schedules it.
        problems = family_escapes(pod, cfg.families)
        if problems:
            return _deny(refusal(problems))
    if not ours:
        return (
            _leave(pod, _pinned(pod, cfg, False), cfg, claims, "", FOREIGN)
            if gpu_in
            else (Admission(True, dict(pod), FOREIGN))
        )
    injected = ""
    if not ignored and cfg.injection.mode == "standalone":
        injected = _config_name(pod, config_name)

    out = copy_json(dict(pod))
    out_spec = out["spec"]
    containers = [*(out_spec.get("initContainers") or ()), *out_spec["containers"]]
    _drop_nulls(out, containers)
    out.setdefault("metadata", {})
    try:
        kai.translate(out, cfg.resources.names)
        gpu = [_mutate_container(c, out, cfg) for c in containers]
        request = pod_request(out_spec, cfg.resources, strict=True) if any(gpu) else None
        # Other device families' containers make the pod ours too, without NVIDIA's injection.
        family = not ignored and claim_families(out, containers, cfg.resources, cfg.families)
    except (RequestError, QuantityError) as e:
        # Refused either way: name the way out first, as for any GPU pod.
        problems = _escapes(pod, pod, cfg, injected, claims) if gpu_in else []
        return _deny(refusal(problems) if problems else str(e))
    if ignored:
        if not gpu_in:
            return Admission(True, dict(pod))
        if request is not None and scheduler == cfg.scheduler_name:
            try:
                pod_options(out["metadata"].get("annotations") or {}, cfg.policies)
            except PolicyError as e:
                return _deny(str(e))
        message = "" if request is None else IGNORED
        return _leave(pod, _pinned(pod, cfg, adopt), cfg, claims, "", message)
    if request is None:
        if family:
            try:
                pod_options(out["metadata"].get("annotations") or {}, cfg.policies)
            except PolicyError as e:
                return _deny(str(e))
            out_spec["schedulerName"] = cfg.scheduler_name
        if not gpu_in:
            return Admission(True, out)
        pin(containers, gpu, cfg.overwrite_env)
        return _leave(pod, out, cfg, claims, injected)
    try:
        pod_options(out["metadata"].get("annotations") or {}, cfg.policies)
    except PolicyError as e:
        return _deny(str(e))
    pin(containers, gpu, cfg.overwrite_env)
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
    return _leave(pod, out, cfg, claims, injected)


def admit_ephemeral(
    pod: Mapping[str, Any], old: Mapping[str, Any], cfg: AdmissionConfig
) -> Admission:
    """Decide on ephemeral containers added to a running pod (kubectl debug): a GPU pod's new
    ones are held to the same checks as its own containers, and pinned to no card."""
    spec = pod.get("spec") or {}
    running = [c.get("name") for c in (old.get("spec") or {}).get("ephemeralContainers") or ()]
    if not names_gpu(spec, cfg.resources.names):
        problems = family_escapes(pod, cfg.families, skip=running)
        return _deny(refusal(problems)) if problems else Admission(True, dict(pod))
    stored = copy_json(dict(pod))
    pin_ephemeral(stored, old, cfg.overwrite_env)
    problems = ephemeral_escapes(pod, old, stored, _rules(cfg))
    problems += family_escapes(pod, cfg.families, skip=running)
    if problems:
        return _deny(refusal(problems))
    return Admission(True, stored)


def admit_update(
    pod: Mapping[str, Any], old: Mapping[str, Any], cfg: AdmissionConfig, status: bool = False
) -> Admission:
    """Decide on an update of a pod (its spec, metadata or status): judged as at creation, so a
    way out refused then is refused when an update adds it (a device annotation added to a
    Pending GPU pod before its gate is lifted). kube-apiserver keeps almost all of the spec as
    created; what it lets change (annotations, labels, images) is judged here. Only what the
    update adds counts: a pod admitted before a check existed, or in a namespace exempt then,
    may still be updated. Through `status` the spec stays as it was (kube-apiserver puts it
    back), its metadata does not."""
    if status:
        pod = {**pod, "spec": old.get("spec")}
    rules = _rules(cfg)
    # Standalone injection's own entries and mounts, as the pod was stored with them.
    stored_with = ((old.get("metadata") or {}).get("annotations") or {}).get(CONFIG_ANNOTATION)
    injected = str(stored_with or "") if cfg.injection.mode == "standalone" else ""

    def judged(p: Mapping[str, Any]) -> list[str]:
        gpu = names_gpu(p.get("spec") or {}, cfg.resources.names)
        return (pod_escapes(p, p, rules, injected) if gpu else []) + family_escapes(p, cfg.families)

    before = set(judged(old))
    added = [p for p in judged(pod) if p not in before]
    return _deny(refusal(added)) if added else Admission(True, dict(pod))
