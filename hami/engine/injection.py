"""What the node side needs inside a GPU container, injected at admission.

Two node integrations:

* `hami-device-plugin`: HAMi's device plugin injects libvgpu.so, /etc/ld.so.preload
  and the CUDA_DEVICE_MEMORY_LIMIT_<i> variables at Allocate; admission adds only
  the driver libraries it lacks.
* `standalone`: admission injects the vGPU library, /etc/ld.so.preload, a
  per-container cache directory and the limits itself. Values that depend on the
  card (UUID, memory of a percentage or whole-card request) are only known at
  bind, so the container requires keys of a per-pod ConfigMap that bind fills:
  until it exists the container cannot start, so it never runs unlimited.

Driver profiles say where the host's driver libraries are: libvgpu.so needs
libcuda.so.1, and on GKE nothing else mounts it into containers.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami.engine.gfd import visible_device
from hami.engine.model import PodDevices

MODES = ("hami-device-plugin", "standalone")
PROFILES = ("gke", "generic", "none")

# libvgpu.so dlopens itself through this path unless CUDA_REDIRECT says otherwise.
VGPU_DIR = "/usr/local/vgpu"
VGPU_LIB = f"{VGPU_DIR}/libvgpu.so"
VGPU_CACHE_DIR = f"{VGPU_DIR}/cache"
SHARED_CACHE_FILE = f"{VGPU_CACHE_DIR}/usage.cache"
PRELOAD = "/etc/ld.so.preload"
PRELOAD_KEY = "ld.so.preload"
LOCK_DIR = "/tmp/vgpulock"
POD_UID_ENV = "HAMI_POD_UID"
CONFIG_ANNOTATION = "hami.io/vgpu-config"

GKE_DRIVER_LIB = "/home/kubernetes/bin/nvidia/lib64"
GKE_CONTAINER_LIB = "/usr/local/nvidia/lib64"


class InjectionError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class DriverProfile:
    name: str
    host_lib: str = ""
    container_lib: str = ""


def driver_profile(name: str, host_lib: str = "", container_lib: str = "") -> DriverProfile:
    if name == "gke":
        return DriverProfile("gke", host_lib or GKE_DRIVER_LIB, container_lib or GKE_CONTAINER_LIB)
    if name == "generic":
        if not host_lib or not container_lib:
            raise InjectionError(
                "driver profile 'generic' needs the host and container lib64 paths"
            )
        return DriverProfile("generic", host_lib, container_lib)
    if name == "none":
        return DriverProfile("none")
    raise InjectionError(f"unknown driver profile {name!r}; valid: {', '.join(PROFILES)}")


@dataclass(frozen=True, slots=True)
class InjectionConfig:
    mode: str = "hami-device-plugin"
    driver: DriverProfile = DriverProfile("none")
    hook_path: str = "/usr/local/vgpu"  # host folder holding libvgpu.so (standalone)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InjectionError(
                f"unknown node integration mode {self.mode!r}; valid: {', '.join(MODES)}"
            )


def _add_volume(spec: dict[str, Any], volume: dict[str, Any]) -> None:
    volumes = spec.setdefault("volumes", [])
    if not any(v.get("name") == volume["name"] for v in volumes):
        volumes.append(volume)


def _mounted(container: Mapping[str, Any], path: str) -> bool:
    return any(m.get("mountPath") == path for m in container.get("volumeMounts") or ())


def _mount(
    spec: dict[str, Any], container: dict[str, Any], volume: dict[str, Any], mount: dict[str, Any]
) -> None:
    """Mount unless the path is already mounted: by our own earlier pass (the webhook may be
    called again), since a GPU container's own mount at these paths is refused
    (hami.engine.mountescapes)."""
    if _mounted(container, mount["mountPath"]):
        return
    _add_volume(spec, volume)
    container.setdefault("volumeMounts", []).append({"name": volume["name"], **mount})


def _env(container: dict[str, Any], entry: dict[str, Any]) -> None:
    env = container.setdefault("env", [])
    if not any(e.get("name") == entry["name"] for e in env):
        env.append(entry)


def _extend_library_path(container: dict[str, Any], path: str) -> None:
    env = container.setdefault("env", [])
    for e in env:
        if e.get("name") == "LD_LIBRARY_PATH":
            if "value" in e:  # a valueFrom is the user's to own
                parts = [p for p in str(e["value"]).split(":") if p]
                if path not in parts:
                    e["value"] = ":".join([*parts, path])
            return
    env.append({"name": "LD_LIBRARY_PATH", "value": path})


def config_key(container: str, variable: str) -> str:
    return f"{container}.{variable}"


def _config_env(name: str, config: str, key: str) -> dict[str, Any]:
    # Not optional: kubelet refuses to start the container until bind has filled it.
    return {
        "name": name,
        "valueFrom": {"configMapKeyRef": {"name": config, "key": key, "optional": False}},
    }


def inject(
    pod: dict[str, Any],
    cfg: InjectionConfig,
    gpu_containers: Sequence[dict[str, Any]],
    nums: Sequence[int],
    config_name: str,
) -> None:
    """Add what the node side needs to each GPU container of `pod` (mutated in place).

    `nums[i]` is how many cards gpu_containers[i] asked for: one limit variable each.
    """
    spec = pod["spec"]
    driver = cfg.driver
    for container, n in zip(gpu_containers, nums, strict=True):
        if driver.name != "none":
            _mount(
                spec,
                container,
                {
                    "name": "hami-driver-lib64",
                    "hostPath": {"path": driver.host_lib, "type": "Directory"},
                },
                {"mountPath": driver.container_lib, "readOnly": True},
            )
            _extend_library_path(container, driver.container_lib)
        if cfg.mode == "standalone":
            _standalone(spec, container, n, cfg, config_name)
    if cfg.mode == "standalone" and gpu_containers:
        pod["metadata"].setdefault("annotations", {})[CONFIG_ANNOTATION] = config_name


def own_mounts(
    hook_path: str, container: str, config: str
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The volumes and mounts standalone injection gives GPU container `container`: HAMi-core,
    the /etc/ld.so.preload that loads it (a key of the pod's limits ConfigMap `config`), the
    container's own usage folder and the node's lock folder."""
    hook = hook_path.rstrip("/")
    return [
        (
            {"name": "hami-vgpu-lib", "hostPath": {"path": f"{hook}/libvgpu.so", "type": "File"}},
            {"mountPath": VGPU_LIB, "readOnly": True},
        ),
        (
            {"name": "hami-vgpu-config", "configMap": {"name": config, "optional": False}},
            {"mountPath": PRELOAD, "subPath": PRELOAD_KEY, "readOnly": True},
        ),
        (
            {
                "name": "hami-vgpu-cache",
                "hostPath": {"path": f"{hook}/containers", "type": "DirectoryOrCreate"},
            },
            {"mountPath": VGPU_CACHE_DIR, "subPathExpr": f"$({POD_UID_ENV})_{container}"},
        ),
        (
            {"name": "hami-vgpu-lock", "hostPath": {"path": LOCK_DIR, "type": "DirectoryOrCreate"}},
            {"mountPath": LOCK_DIR},
        ),
    ]


def _standalone(
    spec: dict[str, Any], container: dict[str, Any], nums: int, cfg: InjectionConfig, config: str
) -> None:
    cname = container["name"]
    _env(container, {"name": POD_UID_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}})
    for volume, mount in own_mounts(cfg.hook_path, cname, config):
        _mount(spec, container, volume, mount)
    _env(container, {"name": "CUDA_DEVICE_MEMORY_SHARED_CACHE", "value": SHARED_CACHE_FILE})
    for i in range(nums):
        var = f"CUDA_DEVICE_MEMORY_LIMIT_{i}"
        _env(container, _config_env(var, config, config_key(cname, var)))
    for var in ("CUDA_DEVICE_SM_LIMIT", "NVIDIA_VISIBLE_DEVICES"):
        _env(container, _config_env(var, config, config_key(cname, var)))


def config_data(container_names: Sequence[str], devices: PodDevices) -> dict[str, str]:
    """The per-pod ConfigMap bind writes: exact limits (MiB as `<n>m`, never rounded) and the cards."""
    data = {PRELOAD_KEY: VGPU_LIB + "\n"}
    for name, container in zip(container_names, devices, strict=True):
        if not container:
            continue
        for i, d in enumerate(container):
            data[config_key(name, f"CUDA_DEVICE_MEMORY_LIMIT_{i}")] = f"{d.usedmem}m"
        data[config_key(name, "CUDA_DEVICE_SM_LIMIT")] = str(container[0].usedcores)
        data[config_key(name, "NVIDIA_VISIBLE_DEVICES")] = ",".join(
            visible_device(d.uuid) for d in container
        )
    return data
