"""The node tier as one context manager: images, network namespace, control plane, node and
the fake device plugin."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e import netns
from tests.e2e.cluster import AS_PLUGIN, REPO_ROOT, Process, ensure_binaries
from tests.e2e.fake_device_plugin import GPUS, READY_MARKER, compile_api
from tests.e2e.kube import wait_for
from tests.e2e.nodespec import GPU_RESOURCE, REGISTER_ANNOTATION, NodeSpec, dump_specs
from tests.e2e.nodetier import images
from tests.e2e.nodetier.node import Node
from tests.e2e.nodetier.plane import NodeControlPlane

ENABLE = "HAMI_NODE_TIER"
K8SBINS = REPO_ROOT / "tests" / "e2e" / "k8sbins"
# The lab's pods mount the GKE driver's lib64 from the node (hostPath, type Directory), and the
# webhook's gke driver profile injects the same folder: it must exist on this machine. The
# chart's libvgpuInstaller (Lab 12, standalone mode) writes HAMi-core into the vgpu folder and
# opens HAMi-core's lock folder to every container.
GKE_DRIVER_ROOT = Path("/home/kubernetes/bin/nvidia")  # the lab's devicePlugin.nvidiaDriverRoot
GKE_VGPU_DIR = GKE_DRIVER_ROOT / "vgpu"  # devicePlugin.libPath, preset=gke
HOST_FOLDERS = (GKE_DRIVER_ROOT / "lib64", GKE_VGPU_DIR, Path("/tmp/vgpulock"))


@dataclass
class NodeCluster:
    plane: NodeControlPlane
    node: Node
    spec: NodeSpec
    device_plugin: Process | None

    def replace_device_plugin(self, spec: NodeSpec) -> None:
        """Swap the node's device plugin, e.g. HAMi's for GKE's own (Lab 12's node)."""
        self.stop_device_plugin()
        self.device_plugin = _start_device_plugin(self.plane, self.node, spec)
        self.spec = spec

    def stop_device_plugin(self) -> None:
        """Stop the device plugin this tier runs on the host (the labs run theirs in pods)."""
        if self.device_plugin is None:
            return
        self.device_plugin.stop()
        self.device_plugin = None
        if self.spec.plugin == "hami":
            forget_hami_registration(self.plane, self.spec.name)

    def describe_gpus(self, spec: NodeSpec) -> None:
        """Where a device plugin in a pod finds the node's cards (fake_device_plugin.GPUS)."""
        (GKE_DRIVER_ROOT / GPUS).write_text(dump_specs([spec]))


def forget_hami_registration(plane: NodeControlPlane, node: str) -> None:
    """HAMi's plugin leaves its registration on the node when it goes, and under the chart's
    admission policy only the plugin's identity may remove it."""
    plane.kube("annotate", *AS_PLUGIN, "node", node, f"{REGISTER_ANNOTATION}-")


@contextlib.contextmanager
def node_cluster(spec: NodeSpec) -> Iterator[NodeCluster]:
    """Build the images, then start everything inside a fresh network namespace."""
    if os.environ.get(ENABLE) != "1":
        pytest.skip(f"node tier off: set {ENABLE}=1 (needs root; scripts/check installs the rest)")
    if os.geteuid() != 0:
        pytest.fail(f"{ENABLE}=1 but not root: containerd and the kubelet need root", pytrace=False)
    begin = time.monotonic()
    bin_dir = ensure_binaries()
    built = time.monotonic()
    archives = images.build(bin_dir)
    imaged = time.monotonic()
    with _host_folders(HOST_FOLDERS), netns.private_network():
        plane = NodeControlPlane(bin_dir)
        with plane:
            node = Node(plane, spec.name)
            try:
                plane.timings["binaries"] = round(built - begin, 2)
                plane.timings["images"] = round(imaged - built, 2)
                start = time.monotonic()
                node.start(archives)
                plane.timings["node"] = round(time.monotonic() - start, 2)
                start = time.monotonic()
                device_plugin = _start_device_plugin(plane, node, spec)
                plane.timings["device plugin"] = round(time.monotonic() - start, 2)
                plane.write_timings()
                yield NodeCluster(plane, node, spec, device_plugin)
            finally:
                node.close()


def _start_device_plugin(plane: NodeControlPlane, node: Node, spec: NodeSpec) -> Process:
    proto = compile_api(K8SBINS, node.scratch / "device-plugin-api")
    spec_file = plane.run_dir / f"device-plugin-{spec.plugin}.json"
    spec_file.write_text(dump_specs([spec]))
    argv = [
        *(sys.executable, "-m", "tests.e2e.fake_device_plugin"),
        *("--kubeconfig", str(plane.device_plugin_kubeconfig)),
        *("--spec", str(spec_file), "--plugin-dir", str(node.device_plugins)),
        *("--proto", str(proto), "--host-files", str(node.dir / "vgpu")),
    ]
    process = node.spawn(f"fake-device-plugin-{spec.plugin}", argv, cwd=REPO_ROOT)

    def registered() -> bool:
        if not process.alive():
            raise process.fail("before registering")
        return READY_MARKER in process.log.read_text(errors="replace")

    wait_for(registered, timeout=60, what="the fake device plugin to register")
    jsonpath = "jsonpath={.status.allocatable.nvidia\\.com/gpu}"
    wait_for(
        lambda: (
            plane.kubectl("get", "node", spec.name, "-o", jsonpath).stdout == str(spec.gpu_capacity)
        ),
        timeout=60,
        what=f"the kubelet to report {spec.gpu_capacity} {GPU_RESOURCE}",
    )
    return process


@contextlib.contextmanager
def _host_folders(paths: tuple[Path, ...]) -> Iterator[None]:
    """Create ``paths`` for the run and remove, with what the run put in them, the folders
    that were created, however the run ends."""
    created: list[Path] = []
    for path in paths:
        missing = [p for p in [path, *path.parents] if not p.exists()]
        if missing:
            created.append(missing[-1])  # the outermost: everything below it is the run's
        path.mkdir(parents=True, exist_ok=True)
    try:
        yield
    finally:
        for folder in created:
            shutil.rmtree(folder, ignore_errors=True)
