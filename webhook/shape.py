"""The shape of what admission reads in an AdmissionReview, checked before the service runs.

kube-apiserver sends only objects it has decoded into its own types, so a field of the wrong
type means a forged or broken review: it gets a 400 naming the field, instead of an exception
from deep inside admission. Only the fields admission reads are checked (anything else may
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


def _object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ShapeError(f"{path} must be an object")
    return value


def _string(value: Any, path: str) -> None:
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
        for key, item in _object(value, path).items():
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
        obj = _object(value, path)
        for key, check in required.items():
            check(obj.get(key), f"{path}.{key}")
        for key, check in optional.items():
            _optional(obj, key, check, path)

    return each


_ENV = _fields({"name": _string}, {"value": _string, "valueFrom": _fields({}, {})})
_RESOURCES = _fields({}, {"limits": _map_of(_quantity), "requests": _map_of(_quantity)})
_CONTAINER = _fields(
    {"name": _string},
    {
        "resources": _RESOURCES,
        "securityContext": _fields({}, {"privileged": _boolean}),
        "env": _list_of(_ENV),
        "volumeMounts": _list_of(_fields({"mountPath": _string}, {})),
    },
)
_POD = _fields(
    {
        "spec": _fields(
            {},
            {
                "containers": _list_of(_CONTAINER),
                "initContainers": _list_of(_CONTAINER),
                "volumes": _list_of(_fields({"name": _string}, {})),
                "schedulerName": _string,
                "nodeName": _string,
                "runtimeClassName": _string,
            },
        )
    },
    {
        "metadata": _fields(
            {},
            {
                "name": _string,
                "generateName": _string,
                "labels": _map_of(_string),
                "annotations": _map_of(_string),
            },
        )
    },
)


def check_request(request: Mapping[str, Any]) -> None:
    """Raise ShapeError for the first field of a review's `request` admission cannot read."""
    kind = _object(request.get("kind"), "request.kind")
    _string(kind.get("kind"), "request.kind.kind")
    _string(request.get("operation"), "request.operation")
    if request["operation"] == "CREATE" and kind["kind"] == "Pod":
        _POD(request.get("object"), "request.object")
