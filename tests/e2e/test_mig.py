"""Dynamic MIG on the real control plane: the issue's A100-40GB worked example end to end.

kube-scheduler, our webhook, filter and bind decide and write; the node simulator plays
HAMi's device plugin in MIG mode (tests/e2e/nodesim_mig.py): it creates each instance at
the placement `hami.io/vgpu-mig-allocations` plans, refuses a plan that is missing or
overlaps, and records the instance it made. What the tests check is what our code wrote
(the allocation, the MIG plan, the pending reason, /metrics, `hami status`, `hami explain`);
the instance identities (migUUID `MIG-...`, GPU instance = placement start, compute instance
0) are the stand-in's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tests.builders import gpu_manifest
from tests.builders.chart import ADMISSION_POLICY_REFUSED
from tests.reference.geometries import A100_40GB

from .cluster import AS_PLUGIN, AS_SCHEDULER, ControlPlane, NodeSim
from .kube import Kube, wait_for
from .nodespec import a100_mig_node

pytestmark = pytest.mark.e2e

NODE = "mig-a100"
CARD = f"GPU-{NODE}-0"
MIG = "hami.io/vgpu-mig-allocations"
PENDING = "0/1 nodes are available: 1 1/1 CardMigTopologyInfeasible."


def plan(kube: Kube, namespace: str, name: str) -> list[tuple[str, int, int, bool]]:
    """(profile, start, size, instance made) per entry of the pod's MIG annotation."""
    entries = json.loads(kube.pod_annotation(namespace, name, MIG) or "[]")
    return [
        (e["profile"], e["placement"]["start"], e["placement"]["size"], "migUUID" in e)
        for e in entries
    ]


def hami(control_plane: ControlPlane, *args: str) -> str:
    argv = [sys.executable, "-m", "hami", *args, "--kubeconfig", str(control_plane.kubeconfig)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=control_plane.env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def metrics(control_plane: ControlPlane) -> list[str]:
    with urllib.request.urlopen(control_plane.metrics_url, timeout=10) as response:
        text: str = response.read().decode()
    return [line for line in text.splitlines() if line.startswith("hami_node_gpu_mig_instance")]


def test_the_issues_worked_example_as_hami_places_it(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    nodesim(a100_mig_node(NODE))
    kube.apply(gpu_manifest("mig-a", 15000), namespace)
    kube.wait_ready(namespace, ["mig-a"])
    kube.apply(gpu_manifest("mig-b", 4000), namespace)
    kube.wait_ready(namespace, ["mig-b"])
    kube.apply(gpu_manifest("mig-c", 15000), namespace)
    message = wait_for(
        lambda: kube.pod_scheduled_message(namespace, "mig-c") or "",
        timeout=60,
        what="mig-c pending",
    )
    assert message.startswith(PENDING), message

    allocated = "hami.io/vgpu-devices-allocated"
    assert kube.pod_annotation(namespace, "mig-a", allocated) == f"{CARD},NVIDIA,19968,43:;"
    assert kube.pod_annotation(namespace, "mig-b", allocated) == f"{CARD},NVIDIA,4864,15:;"
    # Made by the stand-in device plugin from our plan, which it found complete and disjoint.
    assert plan(kube, namespace, "mig-a") == [("3g.20gb", 4, 4, True)]
    assert plan(kube, namespace, "mig-b") == [("1g.5gb", 3, 1, True)]

    status = hami(control_plane, "status").splitlines()
    table = status[status.index(f"PODS {namespace}") + 1 :][:3]
    a, b = f"{CARD},NVIDIA,19968,43:;", f"{CARD},NVIDIA,4864,15:;"
    assert table == [
        f"mig-a   {a:<{len(a) + 3}}3g.20gb@4-7",
        f"mig-b   {b:<{len(a) + 3}}1g.5gb@3",
        f"mig-c   {'<none>':<{len(a) + 3}}<none>",
    ]
    explained = hami(control_plane, "explain", f"{namespace}/mig-c")
    assert f"  {NODE}: 1/1 CardMigTopologyInfeasible" in explained
    assert "3g.20gb@0-3 overlaps 1g.5gb@3" in explained

    made = json.loads(kube.pod_annotation(namespace, "mig-a", MIG) or "")[0]["migUUID"]
    series = metrics(control_plane)
    assert len(series) == 2, series
    assert any(
        f'mig_uuid="{made}"' in line
        and 'profile="3g.20gb"' in line
        and 'placement_start="4"' in line
        and 'placement_size="4"' in line
        and f'device_uuid="{CARD}"' in line
        for line in series
    ), series

    # After a restart the instances are read back from the pods: the next 1g.5gb goes to
    # slice 2, the highest one free.
    control_plane.restart_app()
    kube.apply(gpu_manifest("mig-d", 4000), namespace)
    kube.wait_ready(namespace, ["mig-d"])
    assert plan(kube, namespace, "mig-d") == [("1g.5gb", 2, 1, True)]

    kube("delete", "pod", "-n", namespace, "mig-b", "mig-d", "--wait=true", timeout=60)
    kube.wait_ready(namespace, ["mig-c"], timeout=120)
    assert plan(kube, namespace, "mig-c") == [("3g.20gb", 0, 4, True)]


def planted(
    kube: Kube, namespace: str, name: str, mig: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """A pod bound to the MIG node as a bind would leave it, with `mig` as its MIG plan: nobody
    schedules it (schedulerName nobody), the scheduler's identity writes the annotations and
    the Binding, and the stand-in device plugin then allocates it."""
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"hami.io/webhook": "ignore"}},
        "spec": {
            "schedulerName": "nobody",
            "containers": [
                {
                    "name": "cuda",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000}},
                }
            ],
        },
    }
    kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(manifest))
    devices = f"{CARD},NVIDIA,4864,15:;"
    annotations = {
        "hami.io/vgpu-node": NODE,
        "hami.io/vgpu-time": str(int(time.time())),
        "hami.io/vgpu-devices-to-allocate": devices,
        "hami.io/vgpu-devices-allocated": devices,
        "hami.io/bind-phase": "allocating",
        "hami.io/bind-time": str(int(time.time())),
        **({} if mig is None else {MIG: json.dumps(mig, separators=(",", ":"))}),
    }
    kube(
        "annotate", *AS_SCHEDULER, "-n", namespace, "pod", name,
        *(f"{k}={v}" for k, v in annotations.items()),
    )  # fmt: skip
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
    }
    path = f"/api/v1/namespaces/{namespace}/pods/{name}/binding"
    kube("create", *AS_SCHEDULER, "--raw", path, "-f", "-", stdin=json.dumps(binding))

    def failed() -> dict[str, Any]:
        status: dict[str, Any] = kube.pod(namespace, name).get("status", {})
        return status if status.get("phase") == "Failed" else {}

    status = wait_for(failed, timeout=30, what=f"{name} to be rejected at Allocate")
    assert status["reason"] == "UnexpectedAdmissionError"
    return status


def entry(profile: str, start: int, size: int) -> dict[str, Any]:
    return {
        "containerIndex": 0,
        "deviceIndex": 0,
        "gpuUUID": CARD,
        "profile": profile,
        "placement": {"start": start, "size": size},
    }


def test_the_stand_in_plugin_refuses_a_missing_or_overlapping_plan(
    kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    nodesim(a100_mig_node(NODE))
    kube.apply(gpu_manifest("holder", 15000), namespace)
    kube.wait_ready(namespace, ["holder"])
    assert plan(kube, namespace, "holder") == [("3g.20gb", 4, 4, True)]

    missing = planted(kube, namespace, "no-plan", None)
    assert "container cuda has 0 MIG reservations, requested 1 devices" in missing["message"]
    overlapping = planted(kube, namespace, "on-top", [entry("1g.5gb", 5, 1)])
    assert (
        "1g.5gb@5-5" in overlapping["message"] and f"{namespace}/holder" in overlapping["message"]
    )
    unknown = planted(kube, namespace, "no-such", [entry("1g.5gb", 7, 1)])
    assert f"{CARD} offers no MIG instance 1g.5gb@7-7" in unknown["message"]


def test_only_the_device_plugin_may_record_instances_in_a_plan(
    kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    nodesim(a100_mig_node(NODE))
    kube.apply(gpu_manifest("holder", 4000), namespace)
    kube.wait_ready(namespace, ["holder"])
    written = kube.pod_annotation(namespace, "holder", MIG) or ""
    moved = written.replace('"start":6', '"start":0')
    changed = f"{MIG}={moved}"
    as_admin = kube(
        "annotate", "--overwrite", "-n", namespace, "pod", "holder", changed, check=False
    )
    assert as_admin.returncode != 0 and ADMISSION_POLICY_REFUSED in as_admin.stderr, as_admin.stderr
    # The plugin records what it made in the plan (the stand-in just did); it may not remove
    # a plan, nor write one where the scheduler wrote none.
    removed = kube("annotate", *AS_PLUGIN, "-n", namespace, "pod", "holder", f"{MIG}-", check=False)
    assert removed.returncode != 0 and ADMISSION_POLICY_REFUSED in removed.stderr, removed.stderr
    assert kube.pod_annotation(namespace, "holder", MIG) == written


def test_a_card_fills_to_its_last_slice_as_hami_fills_it(
    kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    # Seven 1g.5gb count 7 x 15 = 105 % of the cores (profile cores are rounded up): /filter
    # placed the seventh and /bind's re-check used to refuse it on every retry (card-taken).
    nodesim(a100_mig_node(NODE, A100_40GB))
    names = [f"slice-{i}" for i in range(7)]
    for name in names:
        kube.apply(gpu_manifest(name, 4000), namespace)
    kube.wait_ready(namespace, names, timeout=180)
    # Made by the stand-in device plugin from our plans, which it found complete and disjoint.
    starts = sorted(plan(kube, namespace, n)[0][1] for n in names)
    assert starts == list(range(7))
    assert all(plan(kube, namespace, n)[0][0] == "1g.5gb" for n in names)
    failed = [
        e.get("message") or ""
        for n in names
        for e in kube.pod_events(namespace, n)
        if e.get("reason") == "BindingFailed"
    ]
    assert failed == []
