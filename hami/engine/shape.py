"""The shape of the pod fields the engine reads, checked before any of it runs.

kube-apiserver (in an AdmissionReview) and kube-scheduler (in extender args) send only pods
they have decoded into their own types, so a field of the wrong type means a forged or broken
request: it is refused with a message naming the field, instead of an exception from deep
inside admission or placement. Only the fields the engine reads are checked (anything else may
carry anything), and JSON null passes wherever the API server reads it as absent.
"""

from collections.abc import Callable, Mapping
from typing import Any

Check = Callable[[Any, str], None]


class ShapeError(ValueError):
    """A field of the review that admission cannot read; the message names its path."""


def _key(path: str, key: str) -> str:
    shown = key if len(key) <= 64 else f"{key[:48]}... ({len(key)} characters)"
    return f"{path}[{shown}]"


def object_of(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ShapeError(f"{path} must be an object")
    return value


def string(value: Any, path: str) -> None:
    if not isinstance(value, str):
        raise ShapeError(f"{path} must be a string")


def _boolean(value: Any, path: str) -> None:
    if not isinstance(value, bool):
        raise ShapeError(f"{path} must be a boolean")


def _quantity(value: Any, path: str) -> None:
    # A JSON null would be a zero quantity to the API server, which then sends "0".
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ShapeError(f"{path} must be a quantity (a string or a number)")


def _optional(obj: Mapping[str, Any], key: str, check: Check, path: str) -> None:
    if obj.get(key) is not None:
        check(obj[key], f"{path}.{key}")


def _map_of(check: Check) -> Check:
    def each(value: Any, path: str) -> None:
        for key, item in object_of(value, path).items():
            check(item, _key(path, key))

    return each


def _list_of(check: Check) -> Check:
    def each(value: Any, path: str) -> None:
        if not isinstance(value, list):
            raise ShapeError(f"{path} must be a list")
        for i, item in enumerate(value):
            check(item, f"{path}[{i}]")

    return each


def _fields(required: Mapping[str, Check], optional: Mapping[str, Check]) -> Check:
    def each(value: Any, path: str) -> None:
        obj = object_of(value, path)
        for key, check in required.items():
            check(obj.get(key), f"{path}.{key}")
        for key, check in optional.items():
            _optional(obj, key, check, path)

    return each


_REF = _fields({}, {"name": string, "key": string})
_ENV = _fields(
    {"name": string},
    {"value": string, "valueFrom": _fields({}, {"configMapKeyRef": _REF, "secretKeyRef": _REF})},
)
_ENV_FROM = _fields({}, {"prefix": string, "configMapRef": _REF, "secretRef": _REF})
_RESOURCES = _fields({}, {"limits": _map_of(_quantity), "requests": _map_of(_quantity)})
_SECURITY = _fields(
    {}, {"privileged": _boolean, "capabilities": _fields({}, {"add": _list_of(string)})}
)
_CONTAINER = _fields(
    {"name": string},
    {
        "resources": _RESOURCES,
        "securityContext": _SECURITY,
        "env": _list_of(_ENV),
        "envFrom": _list_of(_ENV_FROM),
        "volumeMounts": _list_of(
            _fields(
                {"mountPath": string},
                {"name": string, "readOnly": _boolean, "subPath": string, "subPathExpr": string},
            )
        ),
    },
)
_POD = _fields(
    {
        "spec": _fields(
            {},
            {
                "containers": _list_of(_CONTAINER),
                "initContainers": _list_of(_CONTAINER),
                "ephemeralContainers": _list_of(_CONTAINER),
                "volumes": _list_of(
                    _fields({"name": string}, {"hostPath": _fields({"path": string}, {})})
                ),
                "schedulerName": string,
                "nodeName": string,
                "runtimeClassName": string,
                "hostPID": _boolean,
            },
        )
    },
    {
        "metadata": _fields(
            {},
            {
                "name": string,
                "generateName": string,
                "namespace": string,
                "uid": string,
                "labels": _map_of(string),
                "annotations": _map_of(string),
            },
        )
    },
)


def check_pod(pod: Any, path: str) -> None:
    """Raise ShapeError for the first field of `pod` (found at `path`) the engine cannot read."""
    _POD(pod, path)
