"""Every channel out of a GPU slice on the real control plane: closed by the webhook's pins where
an env entry closes it, refused naming what it reaches where nothing can, with the chart's
admission policy and without it; and every pod that leaves the webhook as a GPU pod, a KAI share
it translates included, held to the same checks, with the chart's matchConditions and without.

Creates are server-side dry runs: kube-apiserver runs every admission step (our webhook, the
policy) and answers with the pod as it would store it.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import container, submitted_pod

from .chartrun import stored
from .cluster import ControlPlane
from .kube import Kube, wait_for

pytestmark = pytest.mark.e2e

DENIED = 'admission webhook "vgpu.hami.io" denied the request: GPU pod refused'
GPU = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}
VISIBLE_NONE = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}
SLICE = {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}
# What a GPU-less container of a GPU pod leaves with (hami.engine.pins).
SIDECAR_PINS = [VISIBLE_NONE, {"name": "NVIDIA_NVSWITCH", "value": "disabled"}]


def gpu_pod(
    *sidecars: dict[str, Any], annotations: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    """submitted_pod p: its cuda container on a share of one card, then `sidecars`."""
    cuda = container(GPU, "cuda")
    return submitted_pod(cuda, *sidecars, metadata={"annotations": annotations or {}}, **spec)


def mounting(path: str, read_only: bool) -> dict[str, Any]:
    pod = gpu_pod(volumes=[{"name": "host", "hostPath": {"path": path}}])
    pod["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "host", "mountPath": "/host", "readOnly": read_only}
    ]
    return pod


def in_cuda(pod: dict[str, Any], **fields: Any) -> dict[str, Any]:
    pod["spec"]["containers"][0].update(fields)
    return pod


def dry_run(kube: Kube, pod: dict[str, Any], namespace: str) -> subprocess.CompletedProcess[str]:
    return kube(
        "create",
        "-n",
        namespace,
        "--dry-run=server",
        "-o",
        "json",
        "-f",
        "-",
        stdin=json.dumps(pod),
        check=False,
    )


DEVICES = "- path: /dev/nvidia0\n- path: /dev/nvidiactl\n"
REFUSED = {
    # (the pod, what kubectl's error must name)
    "writable-driver-folder": (
        mounting("/home/kubernetes/bin/nvidia", False),
        "hostPath /home/kubernetes/bin/nvidia, writable: the driver libraries (libcuda.so)",
    ),
    "writable-vgpu-folder": (
        mounting("/usr/local/vgpu", False),
        "hostPath /usr/local/vgpu, writable: HAMi-core's libvgpu.so and usage files",
    ),
    "read-only-dev": (mounting("/dev", True), "hostPath /dev: the device nodes of every card"),
    "writable-sys": (mounting("/sys", False), "hostPath /sys, writable: the PCI config space"),
    "nvidia-cdi-annotation": (
        gpu_pod(annotations={"nvidia.cdi.k8s.io/container.cuda": "management.nvidia.com/gpu=all"}),
        "annotation nvidia.cdi.k8s.io/container.cuda asks the container runtime (CDI) for devices",
    ),
    "gke-device-injector-annotation": (
        gpu_pod(annotations={"devices.gke.io/container.cuda": DEVICES}),
        "annotation devices.gke.io/container.cuda asks GKE's NRI device injector for devices",
    ),
    "host-pid": (gpu_pod(hostPID=True), "spec.hostPID is true: the pod sees every process"),
    "sys-rawio": (
        in_cuda(gpu_pod(), securityContext={"capabilities": {"add": ["SYS_RAWIO"]}}),
        "port I/O and /proc/bus/pci, which reach the PCI config space and memory (BARs)",
    ),
    "gpu-container-env-from": (
        in_cuda(gpu_pod(), envFrom=[{"configMapRef": {"name": "engine"}}]),
        "nothing pins NVIDIA_VISIBLE_DEVICES in it",
    ),
    "dac-read-search": (
        in_cuda(gpu_pod(), securityContext={"capabilities": {"add": ["DAC_READ_SEARCH"]}}),
        "adds DAC_READ_SEARCH (spec.containers[0].securityContext.capabilities.add): "
        "open_by_handle_at",
    ),
    "imex-channel": (
        in_cuda(gpu_pod(), env=[{"name": "NVIDIA_IMEX_CHANNELS", "value": "0"}]),
        "the NVIDIA runtime would add the IMEX channels it names",
    ),
    "hami-core-limit": (
        in_cuda(gpu_pod(), env=[{"name": "CUDA_DEVICE_MEMORY_LIMIT_0", "value": "80g"}]),
        "sets CUDA_DEVICE_MEMORY_LIMIT_0 (spec.containers[0].env[0]), a limit HAMi-core holds",
    ),
    "own-preload-mount": (
        in_cuda(
            gpu_pod(volumes=[{"name": "preload", "configMap": {"name": "preload"}}]),
            volumeMounts=[
                {"name": "preload", "mountPath": "/etc/ld.so.preload", "subPath": "preload"}
            ],
        ),
        "mounts volume preload at /etc/ld.so.preload (spec.containers[0].volumeMounts[0])",
    ),
    "dra-claim": (
        in_cuda(
            gpu_pod(resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]),
            resources={"limits": GPU, "claims": [{"name": "gpus"}]},
        ),
        "spec.resourceClaims[0] (gpus) names ResourceClaimTemplate two-gpus, whose DeviceClass "
        "could not be read (there is none in the namespace yet)",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_channel_no_pin_closes_is_refused_naming_what_it_reaches(
    kube: Kube, namespace: str, admission_policy: bool, case: str
) -> None:
    pod, says = REFUSED[case]
    result = dry_run(kube, pod, namespace)
    assert result.returncode != 0, f"{case} was admitted"
    assert DENIED in result.stderr and says in result.stderr, result.stderr


def test_what_reaches_no_card_is_admitted_and_every_gpu_pod_leaves_pinned(
    kube: Kube, namespace: str, admission_policy: bool
) -> None:
    for path in ("/home/kubernetes/bin/nvidia/lib64", "/sys"):
        stored(kube, mounting(path, True), namespace)
    stored(kube, gpu_pod(volumes=[{"name": "dev", "hostPath": {"path": "/dev"}}]), namespace)
    proxy = {"name": "proxy", "image": "busybox", "envFrom": [{"configMapRef": {"name": "engine"}}]}
    out = stored(kube, gpu_pod(proxy), namespace)
    cuda, sidecar = out["spec"]["containers"]
    assert SLICE in cuda["env"] and sidecar["env"] == SIDECAR_PINS
    # Another scheduler's GPU pod gets the same cards from the same device plugin: pinned too.
    foreign = stored(kube, gpu_pod(proxy, schedulerName="volcano"), namespace)
    assert foreign["spec"]["schedulerName"] == "volcano"
    assert foreign["spec"]["containers"][1]["env"] == SIDECAR_PINS


def test_without_overwrite_env_a_sidecar_keeps_its_image_and_its_env_from_is_refused(
    kube: Kube, namespace: str, app_args: Any
) -> None:
    app_args("--overwrite-env=false")
    plain = stored(kube, gpu_pod({"name": "log", "image": "busybox"}), namespace)
    assert "env" not in plain["spec"]["containers"][1]
    proxy = {"name": "proxy", "image": "busybox", "envFrom": [{"configMapRef": {"name": "engine"}}]}
    result = dry_run(kube, gpu_pod(proxy), namespace)
    assert result.returncode != 0 and "container proxy takes every variable" in result.stderr


def test_kubectl_debug_containers_of_a_gpu_pod_are_pinned_to_no_card(
    kube: Kube, namespace: str, admission_policy: bool
) -> None:
    target = gpu_pod(schedulerName="nobody")
    target["metadata"]["name"] = "target"
    kube("create", "-n", namespace, "-f", "-", stdin=json.dumps(target))
    kube(
        "debug",
        "-n",
        namespace,
        "pod/target",
        "--image=nvidia/cuda:12.4.1-base-ubuntu22.04",
        "-c",
        "peek",
        "--profile=general",
    )
    (added,) = kube.pod(namespace, "target")["spec"]["ephemeralContainers"]
    assert VISIBLE_NONE in added["env"], added


# --- every way a pod becomes a GPU pod, with the chart's matchConditions and without ---------


def chart_match_conditions(control_plane: ControlPlane) -> list[dict[str, Any]]:
    rendered = control_plane.render_chart("templates/webhook.yaml")
    conditions: list[dict[str, Any]] = yaml.safe_load(rendered)["webhooks"][0]["matchConditions"]
    return conditions


def limits(container: dict[str, Any]) -> dict[str, Any]:
    """What the container asks of a GPU (kube-apiserver defaults resources to {})."""
    found: dict[str, Any] = (container.get("resources") or {}).get("limits") or {}
    return {k: v for k, v in found.items() if k.startswith("nvidia.com/")}


def kai_pod(scheduler: str, **container: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "worker", "image": "busybox", **container}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "k", "annotations": {"gpu-fraction": "0.5"}},
        "spec": spec,
    }


@pytest.fixture(scope="module", params=["without-matchConditions", "with-chart-matchConditions"])
def match_conditions(request: pytest.FixtureRequest, control_plane: ControlPlane) -> Iterator[bool]:
    """The e2e webhook is registered without the chart's condition on GPU pods (older clusters,
    other installers); the chart's send only GPU pods and kai-scheduler's KAI shares."""
    if request.param == "without-matchConditions":
        yield False
        return
    kube = control_plane.kube

    def translated() -> bool:
        out = json.loads(
            kube(
                "create",
                "-n",
                "default",
                "--dry-run=server",
                "-o",
                "json",
                "-f",
                "-",
                stdin=json.dumps(kai_pod("")),
            ).stdout
        )
        return bool(limits(out["spec"]["containers"][0]))

    control_plane.set_match_conditions(chart_match_conditions(control_plane))
    try:
        wait_for(lambda: not translated(), timeout=30, what="the matchConditions to apply")
        yield True
    finally:
        control_plane.set_match_conditions(control_plane.harness_match_conditions())
        wait_for(translated, timeout=30, what="the matchConditions to be gone")


ESCAPES: dict[str, tuple[dict[str, Any], str]] = {
    "privileged": ({"securityContext": {"privileged": True}}, "container worker is privileged"),
    "visible-all": (
        {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
        "container worker sets NVIDIA_VISIBLE_DEVICES=all",
    ),
    "sys-admin": (
        {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}},
        "container worker adds SYS_ADMIN",
    ),
}


@pytest.mark.parametrize("scheduler", ["", "hami-scheduler", "default-scheduler", "kai-scheduler"])
def test_a_kai_share_translated_into_a_gpu_pod_passes_the_same_checks(
    kube: Kube, namespace: str, admission_policy: bool, match_conditions: bool, scheduler: str
) -> None:
    for escape, (fields, says) in ESCAPES.items():
        pod = kai_pod(scheduler, **copy.deepcopy(fields))
        result = dry_run(kube, pod, namespace)
        if match_conditions and scheduler != "kai-scheduler":
            # Never sent to the webhook: it leaves as the pod it is, without a GPU resource.
            assert result.returncode == 0, result.stderr
            assert limits(json.loads(result.stdout)["spec"]["containers"][0]) == {}
            continue
        assert result.returncode != 0, f"{escape} under {scheduler or 'no scheduler'} admitted"
        assert DENIED in result.stderr and says in result.stderr, result.stderr
    if not match_conditions or scheduler == "kai-scheduler":
        out = stored(kube, kai_pod(scheduler), namespace)["spec"]["containers"][0]
        assert out["resources"]["limits"]["nvidia.com/gpu"] == "1" and SLICE in out["env"]


# --- the corpus, a sample through the real API server ---------------------------------------

CORPUS = Path(__file__).parents[1] / "corpus"
INDEX = {e["name"]: e for e in yaml.safe_load((CORPUS / "index.yaml").read_text())["pods"]}
SAMPLE = (
    "hami-default-use",
    "hami-vllm-cross-vgpu",
    "kai-gpu-sharing-non-default-container",
    "kai-quickstart-gpu-pod",
    "llm-d-decode",
    "lab14-composed-tenant",
    "vllm-chart-defaults",
    "vllm-chart-configs-and-secrets",
    "gke-rdma-nccl-test",
    "gke-tcpx-unprivileged",
    "aibrix-vineyard",
    "nvidia-dra-gpu-test-count",
)


def test_a_sample_of_the_corpus_gets_its_verdict_on_the_real_api_server(
    kube: Kube, namespace: str, admission_policy: bool
) -> None:
    # The vLLM chart names RuntimeClass nvidia, which kube-apiserver checks exists.
    kube.apply(
        json.dumps(
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": "nvidia"},
                "handler": "nvidia",
            }
        )
    )
    for name in SAMPLE:
        entry = INDEX[name]
        for claim in entry.get("claims", ()):  # what the source file creates beside the pod
            kube("apply", "-n", namespace, "-f", "-", stdin=json.dumps(claim))
        pod = yaml.safe_load((CORPUS / "pods" / f"{name}.yaml").read_text())
        result = dry_run(kube, pod, namespace)
        if entry["verdict"] == "refused":
            assert result.returncode != 0, f"{name} admitted: {entry['why']}"
            assert all(says in result.stderr for says in entry["says"]), result.stderr
        else:
            assert result.returncode == 0, f"{name}: {result.stderr}"
