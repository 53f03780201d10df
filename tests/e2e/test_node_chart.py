"""The chart on the node tier's real kubelet, installed as the README says, with the images
built from the repository: both containers of the scheduler pods become Ready, the pods create
their certificate Secret and patch the webhook's caBundle themselves, kube-apiserver calls the
webhook through its Service (kube-proxy), kube-scheduler reaches /filter and /bind inside the
pod, and Lab 14 Steps 4-8 run with the lab's manifests on workload containers that really start:
the driver mount and LD_LIBRARY_PATH the webhook injects and the environment the device plugin
hands out are read from inside the running container.

What a GKE node adds that this tier cannot show: a real GPU and driver, COS's read-only root
filesystem, and HAMi-core's enforcement of the limits inside the container.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cluster import CHART, DEVICE_PLUGIN_USER
from .kube import Kube, Obj, wait_for
from .nodetier.cluster import NodeCluster
from .test_inject import without_driver_plumbing
from .test_lab14 import EXAMPLES, replay

pytestmark = pytest.mark.node

RELEASE = "hami-py"
NAMESPACE = "hami-system"
DEPLOYMENT = f"{RELEASE}-scheduler"
LAB = "lab14"


def helm(cluster: NodeCluster, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **cluster.plane.env,
        "KUBECONFIG": str(cluster.plane.kubeconfig),
        "HELM_CACHE_HOME": str(folder / "cache"),
        "HELM_CONFIG_HOME": str(folder / "config"),
        "HELM_DATA_HOME": str(folder / "data"),
    }
    return subprocess.run(
        [str(cluster.plane.bin_dir / "helm"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )


@pytest.fixture(scope="module")
def chart(node_tier: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """`helm install` as the README's GKE section, with the locally built image."""
    folder = tmp_path_factory.mktemp("helm")
    kube = node_tier.plane.kube
    helm(
        node_tier,
        folder,
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--set",
        "preset=gke",
        "--set",
        "image.repository=localhost/hami-py",
        # The fake device plugin stands in for HAMi's (whose image is not built here).
        "--set",
        "devicePlugin.enabled=false",
        "--set-json",
        f'admissionPolicy.devicePluginUsers=["{DEVICE_PLUGIN_USER}"]',
    )
    try:
        kube(
            "-n",
            NAMESPACE,
            "rollout",
            "status",
            f"deploy/{DEPLOYMENT}",
            "--timeout=180s",
            timeout=190,
        )
        yield kube
    finally:
        helm(node_tier, folder, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")


def scheduler_pods(kube: Kube) -> list[Obj]:
    selector = "app.kubernetes.io/component=scheduler"
    pods: list[Obj] = json.loads(
        kube("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "json").stdout
    )["items"]
    return pods


def scheduler_logs(kube: Kube) -> str:
    """The `hami` containers' logs, as `kubectl logs` shows them."""
    return "".join(
        kube("logs", "-n", NAMESPACE, pod["metadata"]["name"], "-c", "hami").stdout
        for pod in scheduler_pods(kube)
        if not pod["metadata"].get("deletionTimestamp")
    )


def delete_leader(kube: Kube) -> None:
    """Take the leading scheduler pod away: the other replica must take over the Lease."""
    lease = kube.get("lease", "hami-scheduler", NAMESPACE)  # scheduler.leaseName
    holder = lease["spec"]["holderIdentity"].split("_")[0]
    kube("delete", "pod", "-n", NAMESPACE, holder, "--wait=false")


def test_scheduler_pods_run_and_bootstrap_their_certificate(chart: Kube) -> None:
    kube = chart
    pods = scheduler_pods(kube)
    assert len(pods) == 2
    for pod in pods:
        statuses = {c["name"]: c["ready"] for c in pod["status"]["containerStatuses"]}
        assert statuses == {"kube-scheduler": True, "hami": True}, statuses
    secret = kube.get("secret", f"{DEPLOYMENT}-tls", NAMESPACE)
    ca = base64.b64decode(secret["data"]["ca.crt"])
    webhook = kube.get("mutatingwebhookconfiguration", f"{RELEASE}-webhook")["webhooks"][0]
    assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == ca
    assert webhook["clientConfig"]["service"]["name"] == DEPLOYMENT
    # kube-apiserver reaches the webhook through that Service (kube-proxy's rules): a GPU pod
    # comes back mutated.
    gpu_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": "default"},
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]
        },
    }
    created = kube("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(gpu_pod))
    assert json.loads(created.stdout)["spec"]["schedulerName"] == "hami-scheduler"


def test_lab14_steps_4_to_8_on_a_real_node(chart: Kube) -> None:
    kube = chart
    kube("create", "namespace", LAB)
    wait_for(
        lambda: kube("get", "serviceaccount", "default", "-n", LAB, check=False).returncode == 0,
        timeout=60,
        what="kube-controller-manager to create the namespace's default ServiceAccount",
    )

    def apply(kube: Kube, ns: str, name: str) -> None:
        # Without the driver plumbing written by hand: the webhook's gke profile adds it.
        kube("apply", "-n", ns, "-f", "-", stdin=without_driver_plumbing(EXAMPLES / name))

    # Halfway through Step 7 the leader goes: the other replica places the rest.
    replay(kube, LAB, apply, lambda: delete_leader(kube), lambda: scheduler_logs(kube))

    pod = kube.pod(LAB, "policy-binpack-solo")
    card = pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"].split(",")[0]
    inside = kube(
        "exec",
        "-n",
        LAB,
        "policy-binpack-solo",
        "--",
        "sh",
        "-c",
        "env; echo ---; cat /proc/mounts; echo ---; cat /etc/ld.so.preload",
    ).stdout
    env_text, mounts, preload = inside.split("---\n")
    env = dict(line.split("=", 1) for line in env_text.splitlines() if "=" in line)
    # Injected by the webhook (driver profile gke) ...
    assert env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert any(line.split()[1] == "/usr/local/nvidia/lib64" for line in mounts.splitlines())
    # ... and handed out by the device plugin at Allocate, for the card the scheduler chose.
    assert env["NVIDIA_VISIBLE_DEVICES"] == card
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
    assert preload.strip() == "/usr/local/vgpu/libvgpu.so"
