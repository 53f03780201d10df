"""With leader election on, only the replica beside the Lease holder answers filter and bind."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.e2e.binds import post

from .cluster import ControlPlane
from .kube import Kube, wait_for
from .replicas import lease

pytestmark = pytest.mark.e2e


def test_only_the_leader_serves_filter(
    control_plane: ControlPlane, kube: Kube, namespace: str, app_args: Callable[..., None]
) -> None:
    kube.apply(lease(namespace, "other-replica_1234"), namespace)
    app_args(
        "--leader-elect", "true", "--identity", "hami-0",
        "--leader-elect-resource-namespace", namespace,
    )  # fmt: skip
    pod = {"metadata": {"name": "p", "namespace": namespace, "uid": "u"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}  # fmt: skip
    args = {"Pod": pod, "NodeNames": ["n1"]}

    refused = post(control_plane, "filter", args)
    assert (
        refused.get("error")
        == "this replica is not the leader; only the leader serves filter and bind"
    )

    # The kube-scheduler beside us wins the Lease (its identity is the pod name plus a suffix).
    kube.apply(lease(namespace, "hami-0_5f0c"), namespace)

    def served() -> dict[str, object] | None:
        answer = post(control_plane, "filter", args)
        return answer if "error" not in answer else None

    answer = wait_for(served, timeout=20, what="the new leader to serve filter")
    assert answer == {"failedNodes": {"n1": "node unregistered"}}, json.dumps(answer)
