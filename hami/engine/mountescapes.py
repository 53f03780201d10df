"""A GPU pod's mounts, judged where each container mounts them, as mounted.

* hostPath volumes, by what they reach on the host (`hami.engine.hostpaths`);
* the NVIDIA runtime's device-list folder: the runtime reads a list of cards from mounts of
  /dev/null at or inside /var/run/nvidia-container-devices, named after the cards, so a mount
  there asks for cards; a folder mounted above it (AIBrix's vineyard sample mounts a socket
  folder at /var/run) is no such mount, and is judged by what it reaches;
* in a GPU container, what holds it to its slice: the node side mounts HAMi-core's
  libvgpu.so, its usage files and the /etc/ld.so.preload that loads it into every process
  (HAMi's device plugin at Allocate, standalone injection at admission). The kubelet lists the
  pod's own mounts after the device plugin's and the last mount at a path wins, so a mount of
  the pod's own there (a ConfigMap, an emptyDir's subPath) would leave the card without limits:
  refused, in both node integrations, standalone injection's own mounts excepted.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hami.engine.hostpaths import (
    VGPU_DIR,
    HostFolders,
    mount_reach,
    mounted_path,
    normal,
    within,
)
from hami.engine.injection import POD_UID_ENV, PRELOAD, own_mounts
from hami.engine.requests import ResourceNames

DEVICE_LIST_DIR = "/var/run/nvidia-container-devices"
DEFAULT_FOLDERS = HostFolders()
CACHE_ENV = {"name": POD_UID_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}


@dataclass(frozen=True, slots=True)
class Rules:
    """What the checks need to know of the installation: its host folders, the GPU resource
    names, the scheduler's core policy and the host folder standalone injection mounts
    HAMi-core from."""

    folders: HostFolders = DEFAULT_FOLDERS
    names: ResourceNames = ResourceNames()
    core_policy: str = "default"
    hook_path: str = VGPU_DIR


DEFAULT_RULES = Rules()


def mount_escapes(
    container: Mapping[str, Any],
    where: str,
    volumes: Mapping[Any, Mapping[str, Any]],
    rules: Rules = DEFAULT_RULES,
    gpu: bool = False,
    injected_config: str = "",
) -> list[str]:
    """The container's mounts that reach what no GPU pod may, as mounted: hostPaths, the
    runtime's device-list folder, and in a GPU container what holds it to its slice."""
    name = container.get("name")
    problems = []
    for j, mount in enumerate(container.get("volumeMounts") or ()):
        path = normal(str(mount.get("mountPath") or ""))
        at = f"({where}.volumeMounts[{j}])"
        # The runtime reads a device list from mounts at or inside this folder only (of
        # /dev/null, named after the cards); a folder mounted above it is no such mount.
        if within(path, normal(DEVICE_LIST_DIR)):
            problems.append(
                f"container {name} mounts {mount.get('mountPath')} {at}, where the NVIDIA "
                "runtime reads which cards to expose; mount it elsewhere"
            )
        volume = volumes.get(mount.get("name")) or {}
        if (
            gpu
            and _holds_slice(path, rules)
            and not _own_mount(mount, volume, name, rules, injected_config)
        ):
            problems.append(
                f"container {name} mounts volume {mount.get('name')} at {mount.get('mountPath')} "
                f"{at}, where the node side mounts HAMi-core and the /etc/ld.so.preload that "
                "loads it into every process: a mount of the pod's own at that path replaces "
                "them and the card has no memory or core limit; mount it elsewhere"
            )
        if not volume.get("hostPath") or _own_cache(container, mount, volume, rules.folders):
            continue
        host = mounted_path(volume, mount)
        writable = mount.get("readOnly") is not True
        reach = mount_reach(host, writable, rules.folders)
        if reach:
            problems.append(
                f"container {name} mounts volume {mount.get('name')} {at}, hostPath {host}"
                f"{', writable' if writable else ''}: {reach}"
            )
    return problems


def _holds_slice(path: str, rules: Rules) -> bool:
    """Where a GPU container's limits are mounted: /etc/ld.so.preload and HAMi-core's folder
    (libvgpu.so, the usage files), at or inside. A mount above them (/etc) is mounted first
    (containerd and CRI-O order mounts by depth) and leaves them in place."""
    return path == PRELOAD or any(within(path, normal(d)) for d in (VGPU_DIR, rules.hook_path))


def _own_mount(
    mount: Mapping[str, Any],
    volume: Mapping[str, Any],
    container: object,
    rules: Rules,
    config: str,
) -> bool:
    """One of standalone injection's own mounts, as it writes them (kube-apiserver's defaults
    aside)."""
    if not config:
        return False
    return _essence(volume, mount) in {
        _essence(v, {"name": v["name"], **m})
        for v, m in own_mounts(rules.hook_path, str(container), config)
    }


def _essence(volume: Mapping[str, Any], mount: Mapping[str, Any]) -> tuple[object, ...]:
    return (
        mount.get("name"),
        volume.get("name"),
        (volume.get("hostPath") or {}).get("path"),
        (volume.get("configMap") or {}).get("name"),
        tuple(sorted(k for k in volume if k != "name")),
        normal(str(mount.get("mountPath") or "")),
        mount.get("subPath") or "",
        mount.get("subPathExpr") or "",
        mount.get("readOnly") is True,
    )


def _own_cache(
    container: Mapping[str, Any],
    mount: Mapping[str, Any],
    volume: Mapping[str, Any],
    folders: HostFolders,
) -> bool:
    """Standalone injection's usage-cache mount: the container's own folder under the hook's
    `containers/`, named after the pod's uid (from the API server, never the author)."""
    name = container.get("name")
    return (
        any(normal(volume["hostPath"]["path"]) == normal(f"{d}/containers") for d in folders.vgpu)
        and mount.get("subPathExpr") == f"$({POD_UID_ENV})_{name}"
        and not mount.get("subPath")
        and [e for e in container.get("env") or () if e.get("name") == POD_UID_ENV] == [CACHE_ENV]
    )
