"""Pods as the webhook's DRA mode stores them (gated, their requests recorded), for the unit
tests of the DRA placer: made by the webhook's own AdmissionService, not written by hand."""

from collections.abc import Mapping
from typing import Any

from hami.engine.admission import AdmissionConfig
from hami.engine.dra.config import DraConfig
from hami.engine.jsonpatch import apply
from hami.service.admission import AdmissionService
from tests.builders import FAMILIES

DRA = DraConfig("all")
GPU_LIMITS = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}


def stored_pod(
    name: str = "p",
    uid: str = "u-1",
    limits: Mapping[str, int] = GPU_LIMITS,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod of one container `c` asking `limits`, as DRA mode's webhook stores it."""
    written = {
        "metadata": {"name": name, "namespace": "ns", "annotations": dict(annotations or {})},
        "spec": {"containers": [{"name": "c", "resources": {"limits": dict(limits)}}]},
    }
    review = {
        "uid": "r",
        "kind": {"kind": "Pod"},
        "namespace": "ns",
        "operation": "CREATE",
        "object": written,
    }
    outcome = AdmissionService(AdmissionConfig(families=FAMILIES), dra=DRA).review(review)
    pod: dict[str, Any] = apply(written, outcome.patch)
    pod["metadata"]["uid"] = uid
    return pod
