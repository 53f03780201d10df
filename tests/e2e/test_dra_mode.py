"""The webhook's DRA mode on the real API server (docs/dra.md, issue 42 item 3): a GPU pod of
NVIDIA's and Hygon's resources is stored gated, its requests moved into claim entries, and the
claims derived from it are accepted by kube-apiserver 1.36 (capacity requests, CEL selectors),
as is a claim name cut to fit; an annotation that selects nothing is refused. No DRA driver
runs: the DeviceClasses are HAMi-DRA's as its chart installs them, and the claims stay
unallocated (placing them is the placer's)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from hami.engine.dra.claimspec import claim_spec, pinned_spec
from hami.engine.dra.config import DraConfig
from hami.engine.dra.translate import GATE, REQUESTS, claim_object, container_asks, restore
from hami.engine.model import ContainerDevice
from hami.engine.requests import ResourceDefaults
from tests.builders import FAMILIES

from .chartrun import stored
from .cluster import ControlPlane
from .draworld import (  # noqa: F401 (fixtures)
    allocated_device,
    device_class,
    gpu_pod,
    hami_dra_slice,
    wait_bound,
    whole,
)
from .kube import Kube, wait_for
from .replicas import lease

pytestmark = pytest.mark.e2e


def two_family_pod(name: str, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "containers": [
                {
                    "name": "cuda",
                    "image": "busybox",
                    "resources": {
                        "limits": {
                            "nvidia.com/gpu": "1",
                            "nvidia.com/gpumem": "3000",
                            "nvidia.com/gpucores": "30",
                        }
                    },
                },
                {
                    "name": "dcu",
                    "image": "busybox",
                    "resources": {"limits": {"hygon.com/dcunum": "1", "hygon.com/dcumem": "2000"}},
                },
                {"name": "sidecar", "image": "busybox"},
            ]
        },
    }


def claims_of(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The claim each of the stored pod's entries names, as the placer derives it."""
    written = restore(pod)
    annotations = written["metadata"].get("annotations") or {}
    by_entry = {e["name"]: e["resourceClaimName"] for e in pod["spec"]["resourceClaims"]}
    out = {}
    for container in written["spec"]["containers"]:
        _, asks = container_asks(
            container, annotations, DraConfig("all"), ResourceDefaults(), FAMILIES
        )
        if asks:
            out[by_entry[f"hami-{container['name']}"]] = claim_spec(asks)
    return out


@pytest.mark.usefixtures("dra_mode")
def test_a_gpu_pod_is_stored_gated_and_its_claims_are_accepted(kube: Kube, namespace: str) -> None:
    name = "train-" + "x" * 60  # the claim names are cut to 63 characters with a hash
    kube(
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        stdin=json.dumps(two_family_pod(name, **{"nvidia.com/use-gputype": "A100,H100"})),
    )
    pod = kube.pod(namespace, name)
    spec = pod["spec"]
    assert spec["schedulerName"] == "hami-scheduler"
    assert spec["schedulingGates"] == [{"name": GATE}]
    assert [e["name"] for e in spec["resourceClaims"]] == ["hami-cuda", "hami-dcu"]
    cuda, dcu, sidecar = spec["containers"]
    assert cuda["resources"]["claims"] == [{"name": "hami-cuda"}]
    assert not set(cuda["resources"].get("limits") or {}) & {"nvidia.com/gpu", "nvidia.com/gpumem"}
    assert dcu["resources"]["claims"] == [{"name": "hami-dcu"}]
    assert "claims" not in sidecar.get("resources", {})
    # As kube-apiserver canonicalised them before the webhook saw them (3000 is 3k).
    assert json.loads(pod["metadata"]["annotations"][REQUESTS])["cuda"]["limits"] == {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpumem": "3k",
        "nvidia.com/gpucores": "30",
    }
    claims = claims_of(pod)
    assert all(len(n) <= 63 for n in claims), claims
    for claim_name, claim in claims.items():
        obj = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": claim_name},
            "spec": claim,
        }
        kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(obj))
    stored = json.loads(kube("get", "resourceclaims", "-n", namespace, "-o", "json").stdout)[
        "items"
    ]
    requests = {r["name"]: r["exactly"] for c in stored for r in c["spec"]["devices"]["requests"]}
    assert requests["nvidia"]["capacity"]["requests"] == {"memory": "3000Mi", "cores": "30"}
    assert requests["nvidia"]["selectors"][0]["cel"]["expression"].endswith('contains("h100")')
    assert requests["dcu"]["deviceClassName"] == "dra.hygon.com"
    # Gated until the placer has made its claims: kube-scheduler has not looked at it.
    conditions = kube.pod(namespace, name)["status"]["conditions"]
    assert any(c.get("reason") == "SchedulingGated" for c in conditions), conditions


@pytest.mark.usefixtures("dra_mode")
def test_an_annotation_that_selects_nothing_is_refused(kube: Kube, namespace: str) -> None:
    result = kube(
        "create",
        "-n",
        namespace,
        "--dry-run=server",
        "-f",
        "-",
        stdin=json.dumps(two_family_pod("p", **{"nvidia.com/use-gpuuuid": ","})),
        check=False,
    )
    assert result.returncode != 0
    assert "DRA mode: annotation nvidia.com/use-gpuuuid names nothing" in result.stderr


def test_a_record_written_by_hand_reaches_the_webhook_with_the_charts_conditions(
    control_plane: ControlPlane, dra_mode: None, namespace: str
) -> None:
    """The chart sends the webhook a pod that names no GPU resource but carries the record, so
    the record is judged as the resources it names and never skips the checks."""
    kube = control_plane.kube
    record = {REQUESTS: json.dumps({"cuda": {"limits": {"nvidia.com/gpu": "1"}}})}
    forged = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "forged", "annotations": record},
        "spec": {"containers": [{"name": "cuda", "image": "busybox"}]},
    }
    rendered = yaml.safe_load(control_plane.render_chart("templates/webhook.yaml"))
    control_plane.set_match_conditions(rendered["webhooks"][0]["matchConditions"])

    def stored_gated() -> bool:
        spec = stored(kube, forged, namespace)["spec"]
        return spec.get("schedulingGates") == [{"name": GATE}] and bool(spec.get("resourceClaims"))

    try:
        wait_for(stored_gated, timeout=30, what="the recorded pod to be judged by the webhook")
    finally:
        control_plane.set_match_conditions(control_plane.harness_match_conditions())


@pytest.mark.usefixtures("dra_mode")
def test_the_record_cannot_be_edited_after_creation(kube: Kube, namespace: str) -> None:
    """With the chart's admission policy (the harness installs it), only the scheduler may change
    the record once the pod exists: a smaller ask written later would pass no check."""
    kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(two_family_pod("edited")))
    smaller = json.dumps({"cuda": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1"}}})
    for change in (f"{REQUESTS}={smaller}", f"{REQUESTS}-"):
        result = kube(
            "annotate", "--overwrite", "-n", namespace, "pod", "edited", change, check=False
        )
        assert result.returncode != 0, change
        assert f"{REQUESTS} is scheduling state" in result.stderr, result.stderr


def pinned_pod(kube: Kube, namespace: str, name: str, uuid: str, memory: int) -> None:
    """A pod and its claim pinned to `uuid` as the placer makes them, written by the test (the
    pod names no GPU resource and carries no record, so neither the webhook nor the placer
    takes it): what kube-scheduler does with a pinned claim, whoever pinned it."""
    container = {"name": "cuda", "image": "busybox"}
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [{**container, "resources": {"claims": [{"name": "hami-cuda"}]}}],
            "resourceClaims": [{"name": "hami-cuda", "resourceClaimName": f"{name}-cuda"}],
        },
    }
    kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(obj))
    asked = {**container, "resources": {"limits": {"nvidia.com/gpu": 1}}}
    _, asks = container_asks(asked, {}, DraConfig("all"), ResourceDefaults(), FAMILIES)
    spec = pinned_spec(asks, (ContainerDevice(uuid, memory, 0),))
    claim = claim_object(kube.pod(namespace, name), "cuda", spec)
    kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(claim))


@pytest.mark.usefixtures("dra_mode")
def test_kube_scheduler_takes_the_pinned_card_and_never_more_than_its_capacity(
    kube: Kube, namespace: str, dra_node: Callable[[str, int], list[str]]
) -> None:
    """The design's guard (docs/dra.md): a claim pinned to a card is allocated that card by
    kube-scheduler's DynamicResources plugin, and a second one that would take the card past
    its memory is not allocated at all, whatever the placer believed."""
    uuids = dra_node("dra-node", 2)
    for name in ("first", "second"):
        pinned_pod(kube, namespace, name, uuids[1], 10000)
    wait_bound(kube, namespace, "first", "dra-node")
    assert allocated_device(kube, namespace, "first-cuda") == whole("gpu-1:10000")
    message = wait_for(
        lambda: kube.pod_scheduled_message(namespace, "second"),
        timeout=60,
        what="kube-scheduler to turn the second pod away",
    )
    assert "cannot allocate all claims" in str(message), message
    assert allocated_device(kube, namespace, "second-cuda") == []
    assert not kube.pod(namespace, "second")["spec"].get("nodeName")


@pytest.mark.usefixtures("dra_mode")
def test_the_placer_puts_dra_pods_where_the_card_policies_say(
    kube: Kube, namespace: str, dra_node: Callable[[str, int], list[str]]
) -> None:
    """The leader's placer chooses by hami.io/gpu-scheduler-policy over the cards of its cache
    (here registered by the device plugin stand-in and published in a HAMi-DRA slice under the
    same UUIDs), pins each claim, lifts the gate, and kube-scheduler allocates those cards:
    binpack joins the used card, spread takes the idle one."""
    dra_node("placer-node", 2)
    landed = {}
    for name, policy in (("first", "binpack"), ("packed", "binpack"), ("spread", "spread")):
        pod = json.dumps(gpu_pod(name, "4000", policy=policy))
        kube("create", "-n", namespace, "-f", "-", stdin=pod)
        wait_bound(kube, namespace, name, "placer-node")
        landed[name] = allocated_device(kube, namespace, f"{name}-cuda")
    # Ties go to the highest index (gpu-1); binpack then joins it, spread takes gpu-0.
    assert landed == {
        "first": whole("gpu-1:4000"),
        "packed": whole("gpu-1:4000"),
        "spread": whole("gpu-0:4000"),
    }
    owner = kube.get("resourceclaim", "first-cuda", namespace)["metadata"]["ownerReferences"]
    assert owner[0]["uid"] == kube.pod(namespace, "first")["metadata"]["uid"]


@pytest.mark.usefixtures("dra_mode")
def test_a_pod_no_dra_driver_serves_is_told_which_driver_to_install(
    kube: Kube, namespace: str, control_plane: ControlPlane
) -> None:
    """No DRA driver runs here: the placer has no node to choose among. Its Event and `hami
    explain` name the DeviceClass and driver the pod's cards would come from (before, both
    said `0/0 nodes are available: .`)."""

    # No slice anywhere, and a scheduler that listed them after the last went: an earlier
    # test's slice its watch has not yet seen go would still be a node to place on.
    wait_for(
        lambda: not kube("get", "resourceslices", "-o", "name").stdout.strip(),
        timeout=60,
        what="no ResourceSlice left by an earlier test",
    )
    control_plane.restart_app(extra_args=("--dra-mode=all",))
    kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_pod("lonely", "1000")))
    cls = "hami-core-gpu.project-hami.io"
    told = (
        "0/0 nodes are available: no DRA driver publishes a device on any node (no "
        f"ResourceSlice names one); the pod takes its NVIDIA devices from DeviceClass {cls} "
        f"of driver {cls}: install that DRA driver"
    )

    def failed_scheduling() -> list[str]:
        events = json.loads(kube("get", "events", "-n", namespace, "-o", "json").stdout)
        return [
            e["message"]
            for e in events["items"]
            if e["involvedObject"]["name"] == "lonely" and e["reason"] == "FailedScheduling"
        ]

    (message,) = wait_for(failed_scheduling, timeout=60, what="the placer's FailedScheduling")
    assert message.startswith(told), message
    argv = [sys.executable, "-m", "hami", "explain", f"{namespace}/lonely"]
    argv += ["--kubeconfig", str(control_plane.kubeconfig)]
    lines = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    assert f"  {message}" in lines.splitlines(), lines
    assert {"name": GATE} in kube.pod(namespace, "lonely")["spec"]["schedulingGates"]


@pytest.mark.usefixtures("dra_mode")
def test_the_placer_chooses_only_among_the_nodes_the_pod_may_go_to(
    kube: Kube, namespace: str, dra_node: Callable[[str, int], list[str]]
) -> None:
    """Two nodes published by the DRA slice stand-in: binpack's node policy prefers the one a
    first pod made fuller, but the second pod's nodeSelector names the other one, so its claim
    is pinned there and it is bound there; a selector no node matches leaves the pod gated with
    a FailedScheduling Event naming the selector."""
    for node in ("sel-a", "sel-b"):
        dra_node(node, 1)
    binpack = {"hami.io/node-scheduler-policy": "binpack"}
    filler = gpu_pod("filler", "4000")
    filler["metadata"]["annotations"].update(binpack)
    kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(filler))
    fuller = wait_for(
        lambda: kube.pod(namespace, "filler")["spec"].get("nodeName"),
        timeout=60,
        what="the first pod to be bound",
    )
    other = "sel-b" if fuller == "sel-a" else "sel-a"
    for name, node in (("selected", other), ("nowhere", "no-such-node")):
        pod = gpu_pod(name, "4000", node=node)
        pod["metadata"]["annotations"].update(binpack)
        kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(pod))
    wait_bound(kube, namespace, "selected", other)
    assert allocated_device(kube, namespace, "selected-cuda") == whole("gpu-0:4000")
    message = wait_for(
        lambda: [
            e["message"]
            for e in kube.pod_events(namespace, "nowhere")
            if e["reason"] == "FailedScheduling"
        ],
        timeout=60,
        what="the placer to say why the pod has no node",
    )
    assert "node(s) didn't match Pod's node affinity/selector" in message[0], message
    assert kube.pod(namespace, "nowhere")["spec"].get("schedulingGates") == [{"name": GATE}]


def test_a_restarted_scheduler_places_the_pods_left_gated(
    control_plane: ControlPlane,
    dra_mode: None,
    namespace: str,
    dra_node: Callable[[str, int], list[str]],
) -> None:
    """All the placer's state is in the API: a pod gated while no card could take it is placed
    by the next process once a card appears."""
    kube = control_plane.kube
    pod = json.dumps(gpu_pod("waiting", "4000", policy="spread"))
    kube("create", "-n", namespace, "-f", "-", stdin=pod)
    control_plane.restart_app(extra_args=("--dra-mode=all",))
    assert kube.pod(namespace, "waiting")["spec"].get("schedulingGates") == [{"name": GATE}]
    dra_node("restart-node", 1)
    wait_bound(kube, namespace, "waiting", "restart-node")
    assert allocated_device(kube, namespace, "waiting-cuda") == whole("gpu-0:4000")


def test_a_new_leader_places_the_pods_gated_before_it_led(
    control_plane: ControlPlane,
    dra_mode: None,
    namespace: str,
    dra_node: Callable[[str, int], list[str]],
    app_args: Callable[..., None],
) -> None:
    """Hand-over: only the Lease holder's replica places; one that takes the Lease places the
    pods gated while another held it (last in the module: app_args restarts without DRA mode)."""
    kube = control_plane.kube
    kube.apply(lease(namespace, "other-replica_1234"), namespace)
    app_args(
        "--dra-mode=all",
        "--leader-elect=true",
        "--identity=hami-0",
        f"--leader-elect-resource-namespace={namespace}",
    )
    dra_node("handover-node", 1)
    kube(
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        stdin=json.dumps(gpu_pod("handed", "4000", policy="spread")),
    )
    assert kube.pod(namespace, "handed")["spec"].get("schedulingGates") == [{"name": GATE}]
    # The kube-scheduler beside our process wins the Lease (its identity: the pod name and a suffix).
    kube.apply(lease(namespace, "hami-0_5f0c"), namespace)
    wait_bound(kube, namespace, "handed", "handover-node")
    assert allocated_device(kube, namespace, "handed-cuda") == whole("gpu-0:4000")
