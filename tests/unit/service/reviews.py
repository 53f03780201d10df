"""An AdmissionReview's request for a pod, and the one-container pod the admission service
tests send through it (shared by the DRA-mode tests)."""

from typing import Any


def review(obj: dict[str, Any], namespace: str = "team-a") -> dict[str, Any]:
    return {
        "uid": "0123456789abcdef",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "namespace": namespace,
        "operation": "CREATE",
        "object": obj,
    }


def pod(limits: dict[str, Any], **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "team-a", "annotations": annotations},
        "spec": {"containers": [{"name": "c", "image": "cuda", "resources": {"limits": limits}}]},
    }
