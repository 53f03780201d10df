"""The scheduler counts what it bound, and every bound GPU pod, on the real control plane.

What the attack suite did to get a card double-booked, and what happens now, each with the
chart's admission policy and without it. With the policy a pod author's (or an admin's) edit
of scheduling state is refused, so there the edits are made by a writer the policy trusts (the
scheduler's own identity: another replica, or a HAMi scheduler listed in schedulerUsers); the
cache must not believe them either.

* A bound pod's allocation removed, pointed at another card of its node, at a card the node
  does not have, or at another node: the card it holds stays counted, the next whole-card pod
  goes to the other card, and the one after waits; the pod gets a warning Event.
* An unbound pod carrying an allocation of four cards that no bind holds: fences nothing.
* Pods bound without an allocation of ours (a node named at creation in a namespace the
  administrator exempted, or an allocation naming another node or a card the node lacks), on
  a node whose own device plugin hands out whole cards (Lab 12's kind): counted as whole
  cards, shown by `hami explain` and on /metrics, so our next pods do not double-book them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from tests.builders import container, submitted_pod
from tests.e2e.lab12 import STANDALONE

from .cluster import AS_SCHEDULER, ControlPlane, NodeSim
from .kube import Kube, wait_for
from .nodespec import gke_t4_node, t4_node
from .prometheus import get

pytestmark = pytest.mark.e2e

REFUSED = "is scheduling state that only the GPU scheduler and its device plugin write"
ALLOCATED = "hami.io/vgpu-devices-allocated"
WHOLE_CARD = {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}
FULL = ("CardInsufficientMemory", "CardInsufficientCore", "ExclusiveDeviceAllocateConflict")


def pod(name: str, limits: dict[str, str] = WHOLE_CARD, **spec: Any) -> dict[str, Any]:
    return submitted_pod(container(limits, "cuda"), name=name, **spec)


def create(kube: Kube, obj: dict[str, Any], namespace: str, *user: str) -> None:
    kube("create", *user, "-n", namespace, "-f", "-", stdin=json.dumps(obj))


def card_of(kube: Kube, namespace: str, name: str) -> str:
    allocated = kube.pod_annotation(namespace, name, ALLOCATED) or ""
    return allocated.split(",")[0]


def waits_for_a_card(kube: Kube, namespace: str, name: str) -> str:
    message = wait_for(
        lambda: (
            m
            if (m := kube.pod_scheduled_message(namespace, name)) and any(r in m for r in FULL)
            else None
        ),
        timeout=30,
        what=f"{name} to be turned away for want of a card",
    )
    assert not kube.pod(namespace, name)["spec"].get("nodeName")
    return str(message)


def edit(kube: Kube, admission_policy: bool, namespace: str, name: str, *annotations: str) -> None:
    """Edit the pod's scheduling state as a writer the policy lets through: the admin without
    the policy; with it (which refuses the admin), the scheduler's own identity."""
    command = ("annotate", "--overwrite", "-n", namespace, "pod", name, *annotations)
    if not admission_policy:
        kube(*command)
        return
    result = kube(*command, check=False)
    assert result.returncode != 0 and REFUSED in result.stderr, result.stderr
    kube(*command[:1], *AS_SCHEDULER, *command[1:])


EDITS: dict[str, Callable[[str], tuple[str, ...]]] = {
    "removed": lambda node: (f"{ALLOCATED}-", "hami.io/vgpu-node-"),
    "another-card-of-the-node": lambda node: (f"{ALLOCATED}=GPU-{node}-0,NVIDIA,15360,100:;",),
    "a-card-the-node-lacks": lambda node: (f"{ALLOCATED}=GPU-{node}-9,NVIDIA,15360,100:;",),
    "another-node": lambda node: ("hami.io/vgpu-node=elsewhere",),
}


@pytest.mark.parametrize("change", EDITS)
def test_a_bound_pods_card_stays_held_whatever_is_written_on_it_later(
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    admission_policy: bool,
    change: str,
) -> None:
    name = f"held-{change}"
    node = t4_node(name, [f"GPU-{name}-{i}" for i in range(2)])  # the edits name GPU-<node>-<i>
    nodesim(node)
    create(kube, pod("tenant"), namespace)
    kube.wait_ready(namespace, ["tenant"])
    held = card_of(kube, namespace, "tenant")
    edit(kube, admission_policy, namespace, "tenant", *EDITS[change](node.name))
    # The scheduler has seen the edit once it says so on the tenant (Events are posted in the
    # background: waited for, as a user would look again).
    message = wait_for(
        lambda: {e["reason"]: e["message"] for e in kube.pod_events(namespace, "tenant")}.get(
            "AllocationEditIgnored"
        ),
        timeout=30,
        what="the AllocationEditIgnored Event on the tenant",
    )
    assert f"keeps counting what it was bound with: {held}" in str(message)
    create(kube, pod("second"), namespace)
    kube.wait_ready(namespace, ["second"])
    assert card_of(kube, namespace, "second") != held, "the tenant's card was handed out again"
    create(kube, pod("third"), namespace)
    waits_for_a_card(kube, namespace, "third")


def test_an_unbound_allocation_that_no_bind_holds_fences_nothing(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    ignored: str,
    nodesim: Callable[..., NodeSim],
    admission_policy: bool,
) -> None:
    node = t4_node("unbound-squat")
    nodesim(node)
    four = "".join(f"{c.uuid},NVIDIA,15360,100:" for c in node.cards) + ";"
    squat = pod("squat", {"nvidia.com/gpu": "4"}, schedulerName="nobody")
    squat["metadata"]["annotations"] = {"hami.io/vgpu-node": node.name, ALLOCATED: four}
    if admission_policy:
        result = kube("create", "-n", ignored, "-f", "-", stdin=json.dumps(squat), check=False)
        assert result.returncode != 0 and REFUSED in result.stderr, result.stderr
        create(kube, squat, ignored, *AS_SCHEDULER)
    else:
        create(kube, squat, ignored)
    pods = [f"real-{i}" for i in range(4)]
    for name in pods:
        create(kube, pod(name), namespace)
    kube.wait_ready(namespace, pods)
    assert sorted(card_of(kube, namespace, p) for p in pods) == [c.uuid for c in node.cards]


def explain(control_plane: ControlPlane, target: str) -> str:
    argv = [sys.executable, "-m", "hami", "explain", target, "--gfd-split-count", "4"]
    argv += ["--kubeconfig", str(control_plane.kubeconfig)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout


def test_gpu_pods_the_scheduler_did_not_place_are_counted_as_the_kubelets_whole_cards(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    ignored: str,
    nodesim: Callable[..., NodeSim],
    app_args: Callable[..., None],
    admission_policy: bool,
) -> None:
    # Cards as GKE's own plugin hands them out (Lab 12), shared four ways by our pods.
    app_args(*STANDALONE, "--gfd-split-count", "4")
    name = "outside-gke"
    nodesim(gke_t4_node(name, [f"GPU-{name}-{i}" for i in range(4)]))
    bare = pod("bare", {"nvidia.com/gpu": "1"}, nodeName=name, schedulerName="other")
    create(kube, bare, ignored)
    as_writer = AS_SCHEDULER if admission_policy else ()
    for pod_name, where, card in (
        ("lacking", name, f"GFD-{name}-9"),
        ("elsewhere", "another-node", f"GFD-{name}-0"),
    ):
        claimed = pod(pod_name, {"nvidia.com/gpu": "1"}, nodeName=name, schedulerName="other")
        claimed["metadata"]["annotations"] = {
            "hami.io/vgpu-node": where,
            ALLOCATED: f"{card},NVIDIA,15360,100:;",
        }
        create(kube, claimed, ignored, *as_writer)
    kube.wait_ready(ignored, ["bare", "lacking", "elsewhere"])
    # Three of the four cards are the kubelet's: one whole-card pod of ours fits, not two.
    create(kube, pod("first"), namespace)
    kube.wait_ready(namespace, ["first"])
    create(kube, pod("second"), namespace)
    waits_for_a_card(kube, namespace, "second")

    pending = explain(control_plane, f"{namespace}/second")
    for pod_name, why in (
        ("bare", "bound by other without an allocation of this scheduler"),
        ("lacking", f"it names card GFD-{name}-9, which node {name} does not have"),
        ("elsewhere", f"allocated on node another-node but the pod runs on {name}"),
    ):
        (line,) = [li for li in pending.splitlines() if f"held by {ignored}/{pod_name}," in li]
        assert line.strip().startswith("1 whole card held by") and why in line, pending
    assert "counted as 1 whole card of outside-gke held outside this scheduler" in explain(
        control_plane, f"{ignored}/bare"
    )
    exposition = get(control_plane.metrics_url, timeout=10).decode()
    assert f'hami_node_gpu_outside_scheduler_cards{{node="{name}",zone="vGPU"}} 3.0' in exposition
    assert (
        f'hami_gpu_pod_outside_scheduler_cards{{namespace="{ignored}",node="{name}",'
        'pod="bare",zone="vGPU"} 1.0'
    ) in exposition
    # The kubelet's card comes back when the pod goes, and the waiting pod takes it.
    kube("delete", "-n", ignored, "pod", "bare", "--wait=true", timeout=60)
    kube.wait_ready(namespace, ["second"])
