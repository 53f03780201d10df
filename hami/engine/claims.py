"""The DRA claims of a GPU pod, judged by the DeviceClasses they ask.

A pod names its claims in `spec.resourceClaims` (a ResourceClaimTemplate the claim controller
makes a claim of, or a ResourceClaim made beforehand, shared or not) and its containers pick
them in `resources.claims`. Where a DRA driver publishes the node's cards, a claim of a GPU
DeviceClass hands the pod whole cards the scheduler never counts, in any container that names
it, a GPU-less one included (the NVIDIA_VISIBLE_DEVICES pin does not stop a CDI device). Until
the DRA support counts them, such a claim on a GPU pod is refused.

Which class a claim asks is written in the claim or its template, not in the pod: the webhook
reads each one at admission (`hami.service.claims`) and hands the result here, the object or
why it could not be read. A claim whose classes cannot be told is refused too: a GPU pod never
leaves with a claim nobody looked at. A claim of another class (a NIC, an IMEX channel of the
pod's own ComputeDomain) is admitted.
"""

from collections.abc import Mapping
from typing import Any

# NVIDIA's DRA driver (whole cards, MIG devices, VFIO passthrough) and HAMi-DRA's classes
# (NVIDIA's and Hygon's); `--dra-gpu-device-classes` replaces the list.
GPU_DEVICE_CLASSES = (
    "gpu.nvidia.com",
    "mig.nvidia.com",
    "vfio.gpu.nvidia.com",
    "hami-core-gpu.project-hami.io",
    "dra.hygon.com",
)
TEMPLATE = "ResourceClaimTemplate"
CLAIM = "ResourceClaim"
# (kind, name) -> the object read, or why it could not be read.
Ref = tuple[str, str]
ClaimSources = Mapping[Ref, Mapping[str, Any] | str]
NO_CLAIMS: ClaimSources = {}
FIX = (
    "ask for cards with the GPU resources only (a card count and its slice), or run the "
    "claim in a pod that asks for none (the DRA driver then has the card to itself), or have an "
    "administrator exempt the namespace (label hami.io/webhook=ignore)"
)


def claim_refs(spec: Mapping[str, Any]) -> list[Ref]:
    """The claims and templates a pod names, in order."""
    refs = []
    for claim in spec.get("resourceClaims") or ():
        if not isinstance(claim, Mapping):
            continue
        if claim.get("resourceClaimTemplateName"):
            refs.append((TEMPLATE, str(claim["resourceClaimTemplateName"])))
        elif claim.get("resourceClaimName"):
            refs.append((CLAIM, str(claim["resourceClaimName"])))
    return refs


def device_classes(kind: str, obj: Mapping[str, Any]) -> list[str]:
    """The DeviceClasses a claim or template asks: each request's `exactly` or its
    `firstAvailable` alternatives (resource.k8s.io/v1, what the webhook reads), or the request
    itself (v1beta1, as manifests older than 1.33 write it)."""
    spec = obj.get("spec") or {}
    if kind == TEMPLATE:
        spec = spec.get("spec") or {}
    found = []
    for request in (spec.get("devices") or {}).get("requests") or ():
        for asked in (
            request,
            request.get("exactly") or {},
            *(request.get("firstAvailable") or ()),
        ):
            if asked.get("deviceClassName"):
                found.append(str(asked["deviceClassName"]))
    return list(dict.fromkeys(found))


def claim_escapes(
    spec: Mapping[str, Any], sources: ClaimSources, gpu_classes: tuple[str, ...]
) -> list[str]:
    """The claims of a GPU pod that would give it cards nobody counts, or that cannot be told
    from such claims."""
    problems = []
    for i, claim in enumerate(spec.get("resourceClaims") or ()):
        if not isinstance(claim, Mapping):
            continue
        refs = claim_refs({"resourceClaims": [claim]})
        if not refs:
            continue
        kind, name = refs[0]
        where = f"spec.resourceClaims[{i}] ({claim.get('name')}) names {kind} {name}"
        source = sources.get((kind, name), "it was not read")
        if isinstance(source, str):
            problems.append(
                f"{where}, whose DeviceClass could not be read ({source}); a GPU pod may not "
                f"take devices nobody looked at: create the {kind} first and retry, or {FIX}"
            )
            continue
        gpu = [c for c in device_classes(kind, source) if c in gpu_classes]
        if gpu:
            problems.append(
                f"{where}, which asks DeviceClass {', '.join(gpu)} for GPUs: a DRA driver would "
                "hand the pod whole cards the scheduler does not count, past its slice; "
                f"{FIX}"
            )
    return problems
