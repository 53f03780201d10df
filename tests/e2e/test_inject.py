"""Webhook injection on the real control plane: driver libraries, standalone limits, denials."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e.lab12 import (
    GKE,
    LAB12_UUID,
    STANDALONE,
    apply_lab12,
    resolved_env,
    without_driver_plumbing,
)
from tests.e2e.lab14 import EXAMPLES, NODE, UUIDS, replay

from .cluster import ControlPlane, NodeSim
from .kube import Kube, KubectlError, wait_for
from .nodespec import t4_node

pytestmark = pytest.mark.e2e


def test_inject_driver_libraries_for_lab14_without_hand_written_mounts(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    app_args: Callable[..., None],
) -> None:
    app_args(*GKE)
    nodesim(t4_node(NODE, UUIDS))

    def apply(kube: Kube, ns: str, name: str) -> None:
        kube("apply", "-n", ns, "-f", "-", stdin=without_driver_plumbing(EXAMPLES / name))

    replay(
        kube, namespace, apply, control_plane.restart_app, lambda: control_plane.app_log.read_text()
    )

    # The stored pods carry what the lab's manifests carried by hand.
    pod = kube.pod(namespace, "policy-binpack-solo")
    (cuda,) = pod["spec"]["containers"]
    mount = next(m for m in cuda["volumeMounts"] if m["mountPath"] == "/usr/local/nvidia/lib64")
    assert mount["readOnly"] is True
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"]["path"] == "/home/kubernetes/bin/nvidia/lib64"
    assert {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"} in cuda["env"]


def test_inject_lab12_standalone_exact_limits_on_one_card(
    kube: Kube, namespace: str, nodesim: Callable[..., NodeSim], app_args: Callable[..., None]
) -> None:
    app_args(*STANDALONE)
    nodesim(
        t4_node(
            "gke-kai-hami-test-default-pool-370c394b-pm4j",
            [LAB12_UUID],
            labels={"hami.run/lab-12": "true"},
        )
    )
    apply_lab12(kube, namespace)
    pods = ["kai-hami-lab12-a", "kai-hami-lab12-b"]
    kube.wait_ready(namespace, pods)

    for name in pods:
        pod = kube.pod(namespace, name)
        assert pod["spec"]["schedulerName"] == "hami-scheduler"
        allocated = pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
        assert allocated == f"{LAB12_UUID},NVIDIA,4096,0:;"  # same card, exact MiB
        (cuda,) = pod["spec"]["containers"]
        env = resolved_env(kube, namespace, cuda)
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"  # not KAI's 4147m
        assert env["NVIDIA_VISIBLE_DEVICES"] == LAB12_UUID
        assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/usr/local/vgpu/cache/usage.cache"
        mounts = {m["mountPath"]: m for m in cuda["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        preload = mounts["/etc/ld.so.preload"]
        config = volumes[preload["name"]]["configMap"]["name"]
        cm = kube.get("configmap", config, namespace)
        assert cm["data"][preload["subPath"]] == "/usr/local/vgpu/libvgpu.so\n"
        assert cm["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
        lib = volumes[mounts["/usr/local/vgpu/libvgpu.so"]["name"]]
        assert lib["hostPath"]["path"] == "/home/kubernetes/bin/nvidia/vgpu/libvgpu.so"


FORGED = """\
apiVersion: v1
kind: Pod
metadata:
  name: forged
  annotations:
    hami.io/vgpu-devices-allocated: "GPU-x,NVIDIA,15360,100:;"
spec:
  containers:
  - name: c
    image: busybox
    resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}
"""
UNKNOWN_POLICY = FORGED.replace("forged", "typo").replace(
    'hami.io/vgpu-devices-allocated: "GPU-x,NVIDIA,15360,100:;"',
    "hami.io/gpu-scheduler-policy: binpak",
)


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (FORGED, "annotations hami.io/vgpu-devices-allocated are written by the scheduler only"),
        (
            UNKNOWN_POLICY,
            "unknown GPU scheduler policy 'binpak' in 'binpak'; valid names: binpack, spread",
        ),
    ],
)
def test_inject_denials_name_the_fix(
    kube: Kube, namespace: str, manifest: str, message: str
) -> None:
    with pytest.raises(KubectlError) as denied:
        kube("apply", "-n", namespace, "-f", "-", stdin=manifest)
    text = str(denied.value)
    assert 'admission webhook "vgpu.hami.io" denied the request' in text
    assert message in text


def test_inject_skips_namespaces_labelled_ignore(kube: Kube, namespace: str) -> None:
    kube("label", "namespace", namespace, "hami.io/webhook=ignore")
    manifest = FORGED.replace("forged", "untouched").replace(
        'hami.io/vgpu-devices-allocated: "GPU-x,NVIDIA,15360,100:;"', "note: kept"
    )

    # The API server reads namespace labels through an informer: retry until it sees ours.
    def created() -> bool:
        try:
            kube("apply", "-n", namespace, "-f", "-", stdin=manifest)
        except KubectlError:
            return False
        return True

    wait_for(created, timeout=20, what="the pod to be created past the webhook")
    pod = kube.pod(namespace, "untouched")
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    assert "volumeMounts" not in pod["spec"]["containers"][0]
