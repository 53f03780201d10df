"""Lab 12 on a node without HAMi's device plugin: GKE's own plugin, GFD labels, standalone mode."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest
import yaml

from tests.e2e.lab12 import LAB12, LAB12_UUID, STANDALONE, apply_lab12, resolved_env

from .cluster import ControlPlane, NodeSim
from .kube import Kube, wait_for
from .nodespec import gke_t4_node

pytestmark = pytest.mark.e2e

NODE = "gke-kai-hami-test-default-pool-370c394b-pm4j"
CARD = f"GFD-{NODE}-0"  # hami.engine.gfd's id: nothing on such a node knows the UUID
PODS = ["kai-hami-lab12-a", "kai-hami-lab12-b"]

THIRD = """\
apiVersion: v1
kind: Pod
metadata:
  name: kai-hami-lab12-c
  annotations: {gpu-memory: "1000"}
spec:
  schedulerName: kai-scheduler
  nodeSelector: {hami.run/lab-12: "true"}
  containers: [{name: cuda, image: nvidia/cuda:12.4.1-devel-ubuntu22.04}]
"""


def first_line_of_the_log(command: str, env: dict[str, str]) -> str:
    """What the lab's start-up command prints before nvidia-smi: its first step, run by sh."""
    first = command.split("\n")[0].strip()
    assert first == "echo limit=$CUDA_DEVICE_MEMORY_LIMIT_0", first
    return subprocess.run(
        ["sh", "-c", first], env=env, capture_output=True, text=True, check=True, timeout=10
    ).stdout


def explain(control_plane: ControlPlane, pod: str, *flags: str) -> str:
    argv = [sys.executable, "-m", "hami", "explain", pod, "--kubeconfig"]
    argv += [str(control_plane.kubeconfig), *flags]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout


def test_lab12_on_a_node_as_gkes_plugin_and_gfd_leave_it(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    app_args: Callable[..., None],
) -> None:
    app_args(*STANDALONE, "--gfd-split-count", "2")
    nodesim(gke_t4_node(NODE, [LAB12_UUID], labels={"hami.run/lab-12": "true"}))
    node = kube.get("node", NODE)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    assert "hami.io/node-nvidia-register" not in (node["metadata"].get("annotations") or {})

    apply_lab12(kube, namespace)
    kube.wait_ready(namespace, PODS)

    manifests = {d["metadata"]["name"]: d for d in yaml.safe_load_all(LAB12.read_text()) if d}
    for name in PODS:
        pod = kube.pod(namespace, name)
        assert pod["spec"]["nodeName"] == NODE
        annotations = pod["metadata"]["annotations"]
        # Both on the one card, with the exact MiB asked for.
        assert annotations["hami.io/vgpu-devices-allocated"] == f"{CARD},NVIDIA,4096,0:;"
        # No device plugin will report the allocation: the bind did, and took no node lock.
        assert annotations["hami.io/bind-phase"] == "success"
        (cuda,) = pod["spec"]["containers"]
        env = resolved_env(kube, namespace, cuda)
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
        assert env["NVIDIA_VISIBLE_DEVICES"] == "0"  # the card's index on the node
        assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/usr/local/vgpu/cache/usage.cache"
        # The lab's log prints `limit=4147m` (KAI's rounding); ours is the exact request.
        (lab_container,) = manifests[name]["spec"]["containers"]
        assert first_line_of_the_log(lab_container["command"][-1], env) == "limit=4096m\n"
        mounts = {m["mountPath"]: m for m in cuda["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        preload = mounts["/etc/ld.so.preload"]
        cm = kube.get("configmap", volumes[preload["name"]]["configMap"]["name"], namespace)
        assert cm["data"][preload["subPath"]] == "/usr/local/vgpu/libvgpu.so\n"
        lib = volumes[mounts["/usr/local/vgpu/libvgpu.so"]["name"]]["hostPath"]
        # Where the chart's libvgpuInstaller puts the library on GKE.
        assert lib == {"path": "/home/kubernetes/bin/nvidia/vgpu/libvgpu.so", "type": "File"}
    annotations = kube.get("node", NODE)["metadata"].get("annotations") or {}
    assert "hami.io/mutex.lock" not in annotations
    # Without GKE's time-sharing the node advertises 1 nvidia.com/gpu: a real kubelet admits
    # one of the two. The bind that makes two says so (Event, log), and so does explain; both
    # binds say it when both pods were filtered before either was bound (the kubelet refuses
    # whichever comes second).
    short = f"node {NODE} advertises 1 nvidia.com/gpu but its pods take 2 card slots"
    warned = [
        e["message"]
        for name in PODS
        for e in kube.pod_events(namespace, name)
        if e.get("reason") == "NodeAdvertisesTooFewGPUs"
    ]
    assert warned and all(w.startswith(short) for w in warned), warned
    assert "node advertises too few GPUs" in control_plane.app_log.read_text()
    for name in PODS:
        shown = explain(control_plane, f"{namespace}/{name}", "--gfd-split-count", "2")
        assert f"  warning: {short}" in shown, shown

    # The split count holds: a third tenant waits although 7 GiB of the card are free.
    kube("apply", "-n", namespace, "-f", "-", stdin=THIRD)
    message = wait_for(
        lambda: kube.pod_scheduled_message(namespace, "kai-hami-lab12-c"),
        timeout=60,
        what="the third pod to be reported unschedulable",
    )
    assert message is not None and "1/1 CardTimeSlicingExhausted" in message, message
    third = f"{namespace}/kai-hami-lab12-c"
    assert f"  {NODE}: 1/1 CardTimeSlicingExhausted" in explain(
        control_plane, third, "--gfd-split-count", "2"
    )
    # Without the scheduler's setting, explain sees what a HAMi-only scheduler would see.
    assert "hami.io/node-nvidia-register" in explain(control_plane, third)
    kube("delete", "-n", namespace, "pod", PODS[0], timeout=90)
    kube.wait_ready(namespace, ["kai-hami-lab12-c"])
    placed = kube.pod(namespace, "kai-hami-lab12-c")["metadata"]["annotations"]
    assert placed["hami.io/vgpu-devices-allocated"] == f"{CARD},NVIDIA,1000,0:;"
