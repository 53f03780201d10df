"""The shape of what admission reads in an AdmissionReview, checked before the service runs."""

from collections.abc import Mapping
from typing import Any

from hami.engine.shape import ShapeError, check_pod, object_of, string
from hami.service.admission import EPHEMERAL, UPDATED

__all__ = ["ShapeError", "check_request"]


def check_request(request: Mapping[str, Any]) -> None:
    """Raise ShapeError for the first field of a review's `request` admission cannot read."""
    kind = object_of(request.get("kind"), "request.kind")
    string(kind.get("kind"), "request.kind.kind")
    string(request.get("operation"), "request.operation")
    if kind["kind"] != "Pod":
        return
    if request["operation"] == "CREATE":
        check_pod(request.get("object"), "request.object")
    elif request["operation"] == "UPDATE" and request.get("subResource") in (EPHEMERAL, *UPDATED):
        check_pod(request.get("object"), "request.object")
        check_pod(request.get("oldObject"), "request.oldObject")
