"""Host folders a GPU pod's hostPath mounts must not reach, and how far a mount reaches.

A hostPath volume is judged where a container mounts it, as it mounts it: the host path plus
the mount's subPath, read-only or writable. Paths are compared as Linux resolves them without
following links (`//dev/./x/` is `/dev/x`), and `/var/run` as the `/run` it links to on every
distribution the NVIDIA stack supports.

* Device nodes (`/dev/nvidia*`, `/dev/dri`) are refused however mounted: a read-only mount
  stops writes to the filesystem, not opening a device node for writing, so only the device
  cgroup would stand between the pod and every card.
* PCI devices (`/sys/bus/pci`, `/sys/devices`, `/proc/bus/pci`) are refused when writable: a
  root process writes the config space and maps the memory (BARs) of every card through them.
  Read-only they show what the container's own read-only `/sys` already shows.
* Driver, HAMi-core and runtime folders are refused when writable: every GPU container on the
  node loads the driver's `libcuda.so` and HAMi-core's `libvgpu.so` from them, and the NVIDIA
  runtime reads there which devices to expose, so a tenant could replace what holds every other
  pod to its slice. Read-only they are what the webhook mounts itself.

"At" a folder, "above" it (`/`, `/home`) or "inside" it all count.
"""

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEVICE_NODES = ("/dev/nvidia*", "/dev/dri")
PCI_DEVICES = ("/sys/bus/pci", "/sys/devices", "/proc/bus/pci")
# Where the driver's libraries live on the host: the GPU Operator's driver container root,
# GKE's installer folder, and the library folders of a driver installed on the host itself.
DRIVER_DIRS = (
    "/run/nvidia/driver",
    "/home/kubernetes/bin/nvidia",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
)
# The NVIDIA runtime's configuration and the CDI specifications it turns into devices.
RUNTIME_DIRS = ("/etc/nvidia-container-runtime", "/etc/cdi", "/run/cdi")
VGPU_DIR = "/usr/local/vgpu"  # HAMi's default host folder of libvgpu.so and its usage files


@dataclass(frozen=True, slots=True)
class HostFolders:
    """The folders of this installation: the driver folders plus the one the webhook mounts
    libraries from, and HAMi-core's (the device plugin's default and the standalone hook)."""

    driver: tuple[str, ...] = DRIVER_DIRS
    vgpu: tuple[str, ...] = (VGPU_DIR,)


def host_folders(driver_lib: str, hook_path: str) -> HostFolders:
    extra = (driver_lib,) if driver_lib else ()
    return HostFolders(
        driver=tuple(dict.fromkeys((*DRIVER_DIRS, *extra))),
        vgpu=tuple(dict.fromkeys((VGPU_DIR, hook_path))),
    )


def normal(path: str) -> str:
    """The path as Linux resolves it, without following links."""
    resolved = "/" + posixpath.normpath("/" + path.lstrip("/")).lstrip("/")
    if resolved == "/var/run" or resolved.startswith("/var/run/"):
        return resolved.removeprefix("/var")
    return resolved


def within(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or lies under it; `folder`'s last part may end in `*`."""
    head, _, last = folder.rpartition("/")
    if not last.endswith("*"):
        return path == folder or path.startswith(folder.rstrip("/") + "/")
    parent = path.removeprefix(head + "/").partition("/")[0]
    return path.startswith(head + "/") and parent.startswith(last[:-1])


def _touches(path: str, folders: Sequence[str]) -> str:
    """The first of `folders` that `path` is at, above or inside, or ""."""
    for folder in folders:
        if within(path, folder) or within(folder.rstrip("*"), path):
            return folder
    return ""


def reaches_devices(host_path: str) -> bool:
    """Whether a hostPath at `host_path` exposes the cards' device nodes."""
    return bool(_touches(normal(host_path), DEVICE_NODES))


def mount_reach(path: str, writable: bool, folders: HostFolders) -> str:
    """What a mount of host `path` reaches that no GPU pod may, worded for a denial, or ""."""
    path = normal(path)
    if _touches(path, DEVICE_NODES):
        return (
            "the device nodes of every card on the node (/dev/nvidia*), which a read-only "
            "mount does not stop a process from opening; remove the mount (the device plugin "
            "adds the pod's own cards)"
        )
    if not writable:
        return ""
    fix = "; mount it readOnly: true"
    if _touches(path, PCI_DEVICES):
        return (
            "the PCI config space and memory (BARs) of every card on the node, written as root"
            f"{fix} (sysfs is readable in every container as it is)"
        )
    if _touches(path, folders.vgpu):
        return (
            "HAMi-core's libvgpu.so and usage files, which hold every GPU pod on the node to "
            f"its slice: a pod could replace them and drop everyone's limits{fix}"
        )
    if _touches(path, folders.driver):
        return (
            "the driver libraries (libcuda.so) every GPU container on the node loads: a pod "
            f"could replace them and drop every pod's limits{fix}"
        )
    if _touches(path, RUNTIME_DIRS):
        return (
            "the NVIDIA runtime's configuration and device specifications, which decide the "
            f"devices of every container on the node{fix}"
        )
    return ""


def mounted_path(volume: Mapping[str, Any], mount: Mapping[str, Any]) -> str:
    """The host path a mount of a hostPath volume shows: a subPath narrows it; a subPathExpr,
    known only at start, lies somewhere inside the volume, judged as the volume's root."""
    root = str(volume["hostPath"]["path"])
    sub = mount.get("subPath")
    return posixpath.join(root, str(sub)) if sub else root
