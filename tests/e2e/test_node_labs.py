"""Lab 14 and Lab 12, command by command, as their write-ups run them (tests/e2e/labs/*.yaml),
against this repository's chart on the node tier's real kubelet: each command runs as written
(bar the listed edits), in the namespaces the labs use, and what it prints is compared with
what the write-up prints (tests/e2e/transcript.py), every remaining difference listed with its
reason.

The node starts as GKE leaves a T4 node: GKE's own plugin as a DaemonSet in kube-system (a
stand-in). Lab 14 installs the chart with HAMi's values into kube-system, which runs the
stand-in for HAMi's image in the chart's device plugin DaemonSet; Lab 12 installs it in
standalone mode beside GKE's plugin with GPU time-sharing. The checks inside the containers say
which values our webhook and scheduler wrote and which the stand-in handed out.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami.engine.nvidianames import DEVICES_ALLOCATED
from tests.e2e.lab12 import LAB12_UUID
from tests.e2e.lab14 import NODE, UUIDS

from .cluster import REPO_ROOT
from .kube import Kube, wait_for
from .nodespec import gke_t4_node, t4_node
from .nodetier import gke
from .nodetier.cluster import GKE_VGPU_DIR, NodeCluster, forget_hami_registration
from .transcript import Shell, Transcript, load

pytestmark = [pytest.mark.node, pytest.mark.e2e]  # the built binaries, a real kubelet

ACCELERATOR = {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}


@pytest.fixture(scope="module")
def gke_node(node_tier: NodeCluster) -> Iterator[NodeCluster]:
    """The node as GKE leaves it: no HAMi, GKE's plugin in a pod, the accelerator label (what
    the modules before this one put on it taken off)."""
    kube = node_tier.plane.kube
    node_tier.stop_device_plugin()
    for ns in ("lab12", "lab14"):
        kube("delete", "namespace", ns, "--ignore-not-found", "--wait=true", timeout=190)
    labels = json.loads(kube("get", "node", NODE, "-o", "jsonpath={.metadata.labels}").stdout)
    ours = [k for k in labels if k.startswith(("nvidia.com/", "hami.run/")) or k == "gpu"]
    kube(
        "label",
        "node",
        NODE,
        *(f"{k}-" for k in ours),
        *(f"{k}={v}" for k, v in ACCELERATOR.items()),
    )
    yield node_tier
    kube("delete", "daemonset", gke.NAME, "-n", gke.NAMESPACE, "--ignore-not-found")


@pytest.fixture(scope="module")
def shell(node_tier: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Shell:
    """bash in a folder laid out as the labs expect: their examples under the lab repository's
    path, this repository's chart at ./helm; kubectl and helm the tier's."""
    plane = node_tier.plane
    folder = tmp_path_factory.mktemp("labs")
    examples = folder / "tutorials" / "labs" / "examples"
    examples.mkdir(parents=True)
    (examples / "14-composable-scheduler-policies-gke").symlink_to(REPO_ROOT / "examples" / "lab14")
    (examples / "12-kai-scheduler-hami-gke").symlink_to(REPO_ROOT / "examples" / "lab12")
    (folder / "helm").symlink_to(REPO_ROOT / "helm")
    env = {
        **plane.env,
        "PATH": f"{plane.bin_dir}:/usr/bin:/bin",
        "KUBECONFIG": str(plane.kubeconfig),
        **{
            f"HELM_{k}_HOME": str(folder / ".helm" / k.lower()) for k in ("CACHE", "CONFIG", "DATA")
        },
    }
    return Shell(folder, env, plane.run_dir / "labs.log")


def replay(
    shell: Shell, transcript: Transcript, until: str | None = None, after: str | None = None
) -> None:
    """The transcript's steps after ``after`` up to ``until`` (both by id; None: the ends)."""
    ids = [s.id for s in transcript.steps]
    first = ids.index(after) + 1 if after else 0
    last = ids.index(until) + 1 if until else len(ids)
    for step in transcript.steps[first:last]:
        shell(transcript, step)


def inside(kube: Kube, ns: str, pod: str) -> tuple[dict[str, str], str, str]:
    """The container's environment, mounts and /etc/ld.so.preload, read in the container."""
    text = kube(
        *("exec", "-n", ns, pod, "--", "sh", "-c"),
        "env; echo ---; cat /proc/mounts; echo ---; cat /etc/ld.so.preload",
    ).stdout
    env_text, mounts, preload = text.split("---\n")
    env = dict(line.split("=", 1) for line in env_text.splitlines() if "=" in line)
    return env, mounts, preload


def test_lab14_command_by_command(gke_node: NodeCluster, shell: Shell) -> None:
    kube = gke_node.plane.kube
    # GKE's plugin lists the lab's four T4s (Step 1), found where HAMi's finds them later.
    gke_node.describe_gpus(t4_node(NODE, UUIDS))
    gke.run(kube, NODE, shared_clients=1, cards=len(UUIDS))
    lab14 = load("lab14")
    replay(shell, lab14, until="step-7")

    # In the container of Step 7's binpack pod: the card our scheduler chose (its allocation
    # annotation, which Step 7's lab-card printed) is the one the device plugin handed out.
    # The stand-in plugin set NVIDIA_VISIBLE_DEVICES and the limits from the annotation our
    # bind wrote (hami.io/vgpu-devices-to-allocate); LD_LIBRARY_PATH and the lib64 mount are
    # the lab's manifest's; /etc/ld.so.preload is what the stand-in's vgpu-init.sh copied.
    pod = kube.pod("default", "policy-binpack-solo")
    card, _, memory, cores = (
        pod["metadata"]["annotations"][DEVICES_ALLOCATED].split(":")[0].split(",")
    )
    env, mounts, preload = inside(kube, "default", "policy-binpack-solo")
    assert (env["NVIDIA_VISIBLE_DEVICES"], env["CUDA_DEVICE_MEMORY_LIMIT_0"]) == (
        card,
        f"{memory}m",
    )
    assert env["CUDA_DEVICE_SM_LIMIT"] == cores
    assert env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert any(line.split()[1] == "/usr/local/nvidia/lib64" for line in mounts.splitlines())
    assert preload == "/usr/local/vgpu/libvgpu.so\n"

    replay(shell, lab14, after="step-7")
    # GKE's plugin is back once the lab's cleanup takes its label off, as the lab says.
    gke.wait_advertised(kube, NODE, len(UUIDS))


def held_leases(kube: Kube) -> list[str]:
    """Leases named hami-scheduler whose holder renewed them within their duration."""
    now = dt.datetime.now(dt.UTC)
    held = []
    for lease in json.loads(kube("get", "leases", "-A", "-o", "json").stdout)["items"]:
        spec = lease.get("spec") or {}
        if lease["metadata"]["name"] != "hami-scheduler" or not spec.get("holderIdentity"):
            continue
        renewed = dt.datetime.fromisoformat(spec["renewTime"].replace("Z", "+00:00"))
        if (now - renewed).total_seconds() < spec.get("leaseDurationSeconds", 15):
            held.append(f"{lease['metadata']['namespace']}/{spec['holderIdentity']}")
    return held


def test_lab12_command_by_command(gke_node: NodeCluster, shell: Shell) -> None:
    kube = gke_node.plane.kube
    # Lab 14's kube-scheduler may have gone without giving its Lease up (its Role went with the
    # same uninstall): until the Lease's duration has passed, the chart takes it for a scheduler
    # serving hami-scheduler that may still run, and refuses a plain install beside it.
    wait_for(lambda: not held_leases(kube), 60, what="Lab 14's Lease released or expired")
    # What Lab 14's HAMi plugin registered stays on the node when it goes (as HAMi's does);
    # Lab 12's node never had it.
    forget_hami_registration(gke_node.plane, NODE)
    # One T4, time-sharing with two clients (README, Lab 12: Before you start).
    gke_node.describe_gpus(gke_t4_node(NODE, [LAB12_UUID]))
    gke.run(kube, NODE, shared_clients=2, cards=1)
    lab12 = load("lab12")
    replay(shell, lab12, until="step-6")

    # In each container, all of it written by us: the limit and the card's index by /bind (the
    # pod's vgpu ConfigMap), /etc/ld.so.preload by the webhook (same ConfigMap), libvgpu.so by
    # the chart's libvgpuInstaller (a placeholder from the stand-in image, where HAMi's image
    # has HAMi-core). GKE's plugin hands out nothing here (its Allocate needs the GPU).
    library = (GKE_VGPU_DIR / "libvgpu.so").read_text()
    for name in ("kai-hami-lab12-a", "kai-hami-lab12-b"):
        pod = kube.pod("default", name)
        assert pod["metadata"]["annotations"][DEVICES_ALLOCATED] == f"GFD-{NODE}-0,NVIDIA,4096,0:;"
        env, mounts, preload = inside(kube, "default", name)
        assert (env["CUDA_DEVICE_MEMORY_LIMIT_0"], env["NVIDIA_VISIBLE_DEVICES"]) == ("4096m", "0")
        # The driver's libraries, by the webhook's gke profile.
        assert env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
        assert any(line.split()[1] == "/usr/local/nvidia/lib64" for line in mounts.splitlines())
        assert preload == "/usr/local/vgpu/libvgpu.so\n"
        copied = kube("exec", "-n", "default", name, "--", "cat", "/usr/local/vgpu/libvgpu.so")
        assert copied.stdout == library and "placeholder" in library

    replay(shell, lab12, after="step-6")


def test_the_transcripts_were_replayed_whole(shell: Shell) -> None:
    """Every step of both transcripts ran (the log names each), so none was skipped silently."""
    log = Path(shell.log).read_text()
    for lab in ("lab14", "lab12"):
        transcript = load(lab)
        for step in transcript.steps:
            assert f"### {transcript.title} / {step.id}\n" in log, f"{lab}: {step.id} did not run"
