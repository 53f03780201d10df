"""kube-scheduler's own node checks that come before ours: selector, affinity, taints.

kube-scheduler sends the extender only the nodes its plugins let through, so a
node that a pod's nodeSelector, required node affinity or an untolerated taint
rules out never gets a GPU reason. `hami explain` has no kube-scheduler in
front of it and applies the same rules here, with kube-scheduler's wording, so
that it never says a pod "fits now" on a node the pod can never go to.
"""

from collections.abc import Mapping, Sequence
from typing import Any, Final

NODE_AFFINITY: Final = "node(s) didn't match Pod's node affinity/selector"
UNSCHEDULABLE: Final = "node(s) were unschedulable"
UNSCHEDULABLE_TAINT: Final = "node.kubernetes.io/unschedulable"
_NOT_TOLERATED_EFFECTS = ("NoSchedule", "NoExecute")


def excluded(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """kube-scheduler's reason for leaving `node` out for this pod, or None if it may go there.

    The checks of its NodeUnschedulable, NodeAffinity and TaintToleration plugins, in that
    order (the first that fails names the node's reason).
    """
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    tolerations = pod_spec.get("tolerations") or ()
    unschedulable_taint = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    if (node.get("spec") or {}).get("unschedulable") and not _tolerated(
        unschedulable_taint, tolerations
    ):
        return UNSCHEDULABLE
    selector = pod_spec.get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return NODE_AFFINITY
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or None
    if required is not None:
        terms = required.get("nodeSelectorTerms") or ()
        if not any(_term_matches(t, labels, str(meta.get("name", ""))) for t in terms):
            return NODE_AFFINITY
    for taint in (node.get("spec") or {}).get("taints") or ():
        if taint.get("effect") in _NOT_TOLERATED_EFFECTS and not _tolerated(taint, tolerations):
            return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"
    return None


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    """One nodeSelectorTerm: every expression holds; a term with none matches no node."""
    expressions = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not expressions and not fields:
        return False
    return all(_holds(e, labels) for e in expressions) and all(
        _holds(f, {"metadata.name": name}) for f in fields
    )


def _holds(expression: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    key = expression.get("key", "")
    operator = expression.get("operator", "")
    wanted: Sequence[str] = expression.get("values") or ()
    present = key in values
    value = values.get(key, "")
    if operator == "In":
        return present and value in wanted
    if operator == "NotIn":
        return not present or value not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(wanted) == 1:
        try:
            have, bound = int(value), int(wanted[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def _tolerated(taint: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    return any(_tolerates(t, taint) for t in tolerations)


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' ToleratesTaint: effect (empty matches all), key (empty with Exists matches
    all), then Exists or Equal on the value."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if key and key != taint.get("key"):
        return False
    if not key and operator != "Exists":
        return False
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")
