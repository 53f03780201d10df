"""AdmissionReview decoding and encoding (admission.k8s.io v1 and v1beta1).

Every body gets an answer in the version it came in, with its uid echoed,
even when it cannot be decoded: kube-apiserver then reports our message
instead of an opaque failure. A review whose fields admission reads have the
wrong type (webhook.shape) is as undecodable as one that is not JSON.
"""

import base64
from typing import Any

import orjson

from hami.service.admission import AdmissionOutcome
from hami.webhook.shape import ShapeError, check_request

VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")


class MalformedReviewError(ValueError):
    def __init__(self, message: str, api_version: str = VERSIONS[0], uid: str = "") -> None:
        super().__init__(message)
        self.api_version = api_version
        self.uid = uid


def decode(body: bytes) -> tuple[str, dict[str, Any]]:
    """(apiVersion, request) of a review, or MalformedReviewError saying what is wrong."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise MalformedReviewError(f"body is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise MalformedReviewError("body is not an AdmissionReview object")
    version = str(doc["apiVersion"]) if doc.get("apiVersion") in VERSIONS else VERSIONS[0]
    request = doc.get("request")
    uid = request.get("uid", "") if isinstance(request, dict) else ""
    if doc.get("kind") != "AdmissionReview" or doc.get("apiVersion") not in VERSIONS:
        raise MalformedReviewError(
            f"expected kind AdmissionReview in {' or '.join(VERSIONS)}, got "
            f"{doc.get('kind')!r} {doc.get('apiVersion')!r}",
            version,
            str(uid),
        )
    if not isinstance(request, dict) or not isinstance(uid, str) or not uid:
        raise MalformedReviewError(
            "AdmissionReview has no request or request.uid", version, str(uid)
        )
    try:
        check_request(request)
    except ShapeError as e:
        raise MalformedReviewError(str(e), version, uid) from None
    return str(version), request


def encode(api_version: str, uid: str, outcome: AdmissionOutcome) -> bytes:
    response: dict[str, Any] = {"uid": uid, "allowed": outcome.allowed}
    if not outcome.allowed:
        response["status"] = {
            "code": outcome.code,
            "reason": "Forbidden" if outcome.code == 403 else "BadRequest",
            "message": outcome.message,
        }
    elif outcome.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(outcome.patch)).decode()
    return orjson.dumps(
        {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}
    )


def encode_error(error: MalformedReviewError) -> bytes:
    return encode(
        error.api_version, error.uid, AdmissionOutcome(False, message=str(error), code=400)
    )
