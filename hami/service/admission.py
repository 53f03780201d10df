"""The admission use case: one AdmissionReview request in, allowed/denied and a JSONPatch out."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hami.engine.admission import Admission, AdmissionConfig, admit
from hami.engine.jsonpatch import Patch, diff


@dataclass(frozen=True, slots=True)
class AdmissionOutcome:
    allowed: bool
    patch: Patch = field(default_factory=list)
    message: str = ""
    code: int = 200


class AdmissionService:
    def __init__(self, config: AdmissionConfig) -> None:
        self.config = config

    def review(self, request: Mapping[str, Any]) -> AdmissionOutcome:
        """Decide on a decoded AdmissionReview `request`, of the shape webhook.shape checks.

        Pure: dry runs need no special case.
        """
        kind, operation = request["kind"]["kind"], request["operation"]
        if operation != "CREATE" or kind != "Pod":
            return AdmissionOutcome(True, message=f"{operation} {kind}: not ours")
        pod = request["object"]
        # A pod created with generateName has no name yet; the request uid names its limits object.
        fallback = f"hami-vgpu-{request['uid'][:18]}"
        verdict: Admission = admit(pod, self.config, fallback)
        if not verdict.allowed:
            return AdmissionOutcome(False, message=verdict.message, code=verdict.code)
        return AdmissionOutcome(True, diff(pod, verdict.pod), verdict.message)
