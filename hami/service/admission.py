"""The admission use case: one AdmissionReview request in, allowed/denied and a JSONPatch out."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hami.engine.admission import (
    Admission,
    AdmissionConfig,
    admit,
    admit_ephemeral,
    admit_update,
)
from hami.engine.asks import pod_request
from hami.engine.claims import NO_CLAIMS, ClaimSources
from hami.engine.dra.claimspec import SelectorError
from hami.engine.dra.config import DRA_OFF, DraConfig
from hami.engine.dra.extended import unschedulable_through_dra
from hami.engine.dra.translate import TranslateError, claim_base, restore, to_dra
from hami.engine.familyquota import FamilyQuota, requested_amounts
from hami.engine.jsonpatch import Patch, diff
from hami.engine.quota import EXCEEDING_QUOTA, NamespaceQuota, QuotaUsage, requested_usage
from hami.engine.requests import RequestError
from hami.service.claims import ClaimReader, claims_to_read, read_claims

# The subresource `kubectl debug` adds ephemeral containers through (an UPDATE of the pod).
EPHEMERAL = "ephemeralcontainers"
# Updates of the pod itself and of its status (which may carry metadata too): judged as at
# creation, without a patch.
UPDATED = (None, "", "status")
# A namespace's GPU quota and what it holds now (the cache's), None where nothing limits it.
Quotas = Callable[[str], NamespaceQuota | None]
# The same for the other families' memory and core resources.
FamilyQuotas = Callable[[str], FamilyQuota | None]
# DeviceClass name -> its extendedResourceName ("" for none), as the cache holds them.
ExtendedResources = Callable[[], Mapping[str, str]]


@dataclass(frozen=True, slots=True)
class AdmissionOutcome:
    allowed: bool
    patch: Patch = field(default_factory=list)
    message: str = ""
    code: int = 200


class AdmissionService:
    def __init__(
        self,
        config: AdmissionConfig,
        quotas: Quotas | None = None,
        family_quotas: FamilyQuotas | None = None,
        claims: ClaimReader | None = None,
        dra: DraConfig = DRA_OFF,
        extended: ExtendedResources | None = None,
    ) -> None:
        self.config = config
        self.dra = dra
        self.extended = extended
        self.quotas = quotas
        self.family_quotas = family_quotas
        self.claims = claims

    async def read_claims(self, request: Mapping[str, Any]) -> ClaimSources:
        """The DRA claims and templates a GPU pod of this review names, read from the API
        server for review(); without a reader, each is "not read" (and refused)."""
        refs = claims_to_read(request, self.config.resources.names)
        if not refs:
            return NO_CLAIMS
        if self.claims is None:
            return dict.fromkeys(refs, "this process reads no claims")
        namespace = str(request.get("namespace") or "")
        return await read_claims(self.claims, namespace, refs)

    def review(
        self, request: Mapping[str, Any], claims: ClaimSources = NO_CLAIMS
    ) -> AdmissionOutcome:
        """Decide on a decoded AdmissionReview `request`, of the shape webhook.shape checks;
        `claims` as read_claims() read them.

        Writes nothing: dry runs need no special case.
        """
        kind, operation = request["kind"]["kind"], request["operation"]
        if kind == "Pod" and operation == "UPDATE" and request.get("subResource") == EPHEMERAL:
            added = admit_ephemeral(request["object"], request["oldObject"], self.config)
            if not added.allowed:
                return AdmissionOutcome(False, message=added.message, code=added.code)
            return AdmissionOutcome(True, diff(request["object"], added.pod), added.message)
        if kind == "Pod" and operation == "UPDATE" and request.get("subResource") in UPDATED:
            status = request.get("subResource") == "status"
            updated = admit_update(request["object"], request["oldObject"], self.config, status)
            return AdmissionOutcome(updated.allowed, message=updated.message, code=updated.code)
        if operation != "CREATE" or kind != "Pod":
            return AdmissionOutcome(True, message=f"{operation} {kind}: not ours")
        pod = request["object"]
        # A pod created with generateName has no name yet; the request uid names its limits object.
        fallback = f"hami-vgpu-{request['uid'][:18]}"
        try:
            # What DRA mode moved out is judged as if written in the containers (docs/dra.md).
            written = restore(pod) if self.dra.on else pod
        except TranslateError as e:
            return AdmissionOutcome(False, message=str(e), code=403)
        verdict: Admission = admit(written, self.config, fallback, claims)
        if not verdict.allowed:
            return AdmissionOutcome(False, message=verdict.message, code=verdict.code)
        namespace = str(request.get("namespace") or (pod.get("metadata") or {}).get("namespace"))
        if self._over_quota(verdict.pod, namespace):
            return AdmissionOutcome(False, message=EXCEEDING_QUOTA, code=403)
        try:
            stored = self._moved(verdict.pod, claim_base(pod, str(request["uid"])))
        except (TranslateError, SelectorError, RequestError) as e:
            return AdmissionOutcome(False, message=f"DRA mode: {e}", code=403)
        unplaceable = self._served_through_dra(stored)
        if unplaceable:
            return AdmissionOutcome(False, message=unplaceable, code=403)
        return AdmissionOutcome(True, diff(pod, stored), verdict.message)

    def _served_through_dra(self, pod: Mapping[str, Any]) -> str | None:
        """Why kube-scheduler's DRA extended-resource path would never place the pod as stored
        (hami.engine.dra.extended); DRA mode has moved the resources out of a pod it takes."""
        if self.extended is None or (pod.get("spec") or {}).get("schedulerName") != (
            self.config.scheduler_name
        ):
            return None
        return unschedulable_through_dra(pod, self.extended(), self.config.resources.names)

    def _moved(self, pod: dict[str, Any], base: str) -> dict[str, Any]:
        """The pod to store: moved to DRA where the mode sends it there (docs/dra.md)."""
        if not self.dra.on or (pod.get("spec") or {}).get("schedulerName") != (
            self.config.scheduler_name
        ):
            return pod  # DRA mode off, or a pod this scheduler does not place
        moved = to_dra(pod, self.dra, self.config.resources, self.config.families, base)
        return pod if moved is None else moved

    def _over_quota(self, pod: Mapping[str, Any], namespace: str) -> bool:
        """HAMi's webhook check: the pod's explicit MiB and cores alone exceed what is left,
        of NVIDIA's quota or of another family's (hami.engine.familyquota).

        Percentages and whole cards count 0 here; filter checks them on each card.
        """
        spec = pod.get("spec") or {}
        quota = None if self.quotas is None else self.quotas(namespace)
        theirs = None if self.family_quotas is None else self.family_quotas(namespace)
        if (quota is None and theirs is None) or spec.get(
            "schedulerName"
        ) != self.config.scheduler_name:
            return False  # not limited, or not a pod this scheduler places
        try:
            request = pod_request(spec, self.config.resources, families=self.config.families)
        except RequestError:
            return False  # admit has refused what it cannot read; nothing to count
        families = self.config.families
        if theirs is not None and not theirs.fits(requested_amounts(request, families), families):
            return True
        asked = requested_usage(request)
        return quota is not None and asked != QuotaUsage() and not quota.fits(asked)
