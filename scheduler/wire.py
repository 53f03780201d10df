"""kube-scheduler extender wire types (k8s.io/kube-scheduler/extender/v1).

ExtenderArgs and ExtenderBindingArgs have no JSON tags in Go, so kube-scheduler
sends PascalCase keys; Go decodes any casing, so both are accepted here.
Answers use the keys HAMi answers with.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from hami.engine.shape import ShapeError, check_pod


class BadExtenderArgsError(ValueError):
    pass


def _get(doc: Mapping[str, Any], key: str) -> Any:
    for k, v in doc.items():
        if k.lower() == key.lower():
            return v
    return None


def _object(body: bytes) -> Mapping[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise BadExtenderArgsError(f"body is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise BadExtenderArgsError("body is not a JSON object")
    return doc


def _node_name(node: Any) -> Any:
    meta = _get(node, "metadata") if isinstance(node, dict) else None
    return _get(meta, "name") if isinstance(meta, dict) else None


@dataclass(frozen=True, slots=True)
class FilterArgs:
    pod: dict[str, Any]
    node_names: list[str]


def decode_filter(body: bytes) -> FilterArgs:
    doc = _object(body)
    pod = _get(doc, "pod")
    if not isinstance(pod, dict):
        raise BadExtenderArgsError("extender args missing pod")
    try:
        check_pod(pod, "pod")
    except ShapeError as e:
        raise BadExtenderArgsError(f"extender args: {e}") from None
    names = _get(doc, "nodenames")
    if names is None:
        # nodeCacheCapable: false sends whole Node objects; only their names matter here.
        nodes = _get(doc, "nodes") or {}
        items = (_get(nodes, "items") if isinstance(nodes, dict) else nodes) or []
        if not isinstance(items, list):
            raise BadExtenderArgsError("extender args: nodes.items must be a list of Node objects")
        names = [_node_name(n) for n in items]
    # map(type, ...) runs in C: a generator of isinstance calls was 1 ms at 5,000 names.
    if not isinstance(names, list) or not set(map(type, names)) <= {str}:
        raise BadExtenderArgsError("extender args: nodenames must be a list of node names")
    return FilterArgs(pod, names)


def encode_filter(
    node_names: Sequence[str] | None, failed: Mapping[str, str], error: str = ""
) -> bytes:
    out: dict[str, Any] = {}
    if node_names is not None:
        out["nodenames"] = list(node_names)
    if failed:
        # Not copied where it is a dict already: 5,000 entries for a pod that fits nowhere.
        out["failedNodes"] = failed if isinstance(failed, dict) else dict(failed)
    if error:
        out["error"] = error
    return orjson.dumps(out)


@dataclass(frozen=True, slots=True)
class BindArgs:
    namespace: str
    name: str
    uid: str
    node: str


def decode_bind(body: bytes) -> BindArgs:
    doc = _object(body)
    values = {k: _get(doc, k) for k in ("podName", "podNamespace", "podUID", "node")}
    missing = [
        k
        for k in ("podName", "podNamespace", "node")
        if not isinstance(values[k], str) or not values[k]
    ]
    if missing:
        raise BadExtenderArgsError(f"binding args missing {', '.join(missing)}")
    return BindArgs(
        values["podNamespace"], values["podName"], str(values["podUID"] or ""), values["node"]
    )


def encode_bind(error: str = "") -> bytes:
    return orjson.dumps({"Error": error})
