"""Which pods lack HAMi's node label after their Binding (API servers before 1.35 drop it)."""

from typing import Any

import pytest

from hami.service.labels import missing_label


def pod(annotation: str | None, node: str | None, label: str | None, phase: str = "Pending") -> Any:
    """A pod by where its node is written (our annotation, the Binding's label, spec.nodeName),
    the three things the label mender compares."""
    return {
        "metadata": {
            "annotations": {"hami.io/vgpu-node": annotation} if annotation else {},
            "labels": {"hami.io/vgpu-node": label} if label else {},
        },
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("p", "missing"),
    [
        (pod("n1", "n1", None), "n1"),
        (pod("n1", "n1", "n2"), "n1"),  # a stale label from an earlier bind
        (pod("n1", "n1", "n1"), None),  # copied from the Binding (1.35+)
        (pod("n1", None, None), None),  # not bound: nothing to label yet
        (pod("n1", "n2", None), None),  # an allocation not for the node it runs on
        (pod(None, "n1", None), None),  # not a pod of ours
        (pod("n1", "n1", None, phase="Succeeded"), None),
    ],
)
def test_missing_label(p: Any, missing: str | None) -> None:
    assert missing_label(p) == missing
