"""Each channel out of a GPU slice, closed by a pin where an env entry closes it, refused where
nothing written into the pod can: mounts as mounted, device annotations, hostPID, envFrom, and
every way a pod becomes a GPU pod (a resource, a KAI share), whoever schedules it."""

import copy
from typing import Any

import pytest

from hami.engine.admission import AdmissionConfig, admit, admit_ephemeral
from hami.engine.injection import InjectionConfig, driver_profile
from hami.engine.jsonpatch import diff
from hami.service.admission import AdmissionService
from tests.builders import FAMILIES

CFG = AdmissionConfig(families=FAMILIES)
STANDALONE = AdmissionConfig(injection=InjectionConfig(mode="standalone"), families=FAMILIES)
GKE_STANDALONE = AdmissionConfig(
    injection=InjectionConfig(
        mode="standalone",
        driver=driver_profile("gke"),
        hook_path="/home/kubernetes/bin/nvidia/vgpu",
    ),
    families=FAMILIES,
)
NO_OVERWRITE = AdmissionConfig(overwrite_env=False, families=FAMILIES)
GPU = {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}
VISIBLE_NONE = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}
SLICE = {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}
NO_SWITCHES = {"name": "NVIDIA_NVSWITCH", "value": "disabled"}
NO_CHANNELS = {"name": "NVIDIA_IMEX_CHANNELS", "value": "void"}
# What a GPU-less container of a GPU pod leaves with, and what a GPU container gets beside its own.
SIDECAR_PINS = [VISIBLE_NONE, NO_SWITCHES]
GPU_PINS = [SLICE, NO_CHANNELS, NO_SWITCHES]
SETTINGS = {"configMapRef": {"name": "settings"}}


def gpu_pod(*sidecars: dict[str, Any], **spec: Any) -> dict[str, Any]:
    cuda = {"name": "cuda", "image": "x", "resources": copy.deepcopy(GPU)}
    return {
        "metadata": {"name": "p", "namespace": "team"},
        "spec": {"containers": [cuda, *sidecars], **spec},
    }


def mounting(path: str, read_only: bool | None, sub_path: str = "") -> dict[str, Any]:
    mount: dict[str, Any] = {"name": "host", "mountPath": "/host"}
    if read_only is not None:
        mount["readOnly"] = read_only
    if sub_path:
        mount["subPath"] = sub_path
    pod = gpu_pod(volumes=[{"name": "host", "hostPath": {"path": path}}])
    pod["spec"]["containers"][0]["volumeMounts"] = [mount]
    return pod


def refused(pod: dict[str, Any], cfg: AdmissionConfig = CFG) -> str:
    verdict = admit(copy.deepcopy(pod), cfg)
    assert not verdict.allowed and verdict.message.startswith("GPU pod refused"), verdict
    return verdict.message


def admitted(pod: dict[str, Any], cfg: AdmissionConfig = CFG) -> dict[str, Any]:
    verdict = admit(copy.deepcopy(pod), cfg)
    assert verdict.allowed, verdict.message
    return verdict.pod


# --- mounts, judged as mounted ------------------------------------------------------------

MOUNTS_REFUSED = [
    # (host path, readOnly, subPath, what the denial names)
    ("/dev", True, "", "hostPath /dev: the device nodes of every card"),
    ("/dev/nvidia3", True, "", "a read-only mount does not stop a process from opening"),
    ("/", True, "dev", "hostPath /dev: the device nodes"),
    ("/home/kubernetes/bin/nvidia", None, "", "writable: the driver libraries (libcuda.so)"),
    ("/home/kubernetes/bin/nvidia/lib64", False, "", "mount it readOnly: true"),
    ("/home", False, "kubernetes/bin/nvidia", "hostPath /home/kubernetes/bin/nvidia, writable"),
    ("/home", None, "", "hostPath /home, writable: the driver libraries"),
    ("/run/nvidia/driver", None, "", "the driver libraries"),
    ("/var/run/nvidia", None, "", "hostPath /var/run/nvidia, writable: the driver libraries"),
    ("/usr/lib/x86_64-linux-gnu", None, "", "the driver libraries"),
    ("/usr/local/vgpu", None, "", "HAMi-core's libvgpu.so and usage files"),
    ("/usr/local/vgpu/containers", None, "", "drop everyone's limits"),
    ("/usr/local", None, "", "HAMi-core's libvgpu.so"),
    ("/sys", None, "", "the PCI config space and memory (BARs) of every card"),
    ("/sys/bus/pci/devices/0000:00:04.0", False, "", "PCI config space"),
    ("/proc/bus/pci", None, "", "PCI config space"),
    ("/proc", None, "", "PCI config space"),
    ("/etc/cdi", None, "", "the NVIDIA runtime's configuration and device specifications"),
    ("/var/run/cdi", None, "", "device specifications"),
    ("/etc/nvidia-container-runtime", None, "", "device specifications"),
]


@pytest.mark.parametrize(("path", "read_only", "sub_path", "says"), MOUNTS_REFUSED)
def test_a_mount_that_reaches_the_cards_or_what_limits_them_is_refused(
    path: str, read_only: bool | None, sub_path: str, says: str
) -> None:
    message = refused(mounting(path, read_only, sub_path))
    assert "(spec.containers[0].volumeMounts[0])" in message and says in message, message


MOUNTS_ADMITTED = [
    ("/home/kubernetes/bin/nvidia/lib64", True, ""),  # Lab 14, GKE's GPU networking tests
    ("/home/kubernetes/bin/nvidia", True, ""),
    ("/sys", True, ""),  # what every container's own /sys shows
    ("/sys/bus/pci", True, ""),
    ("/proc/sys", False, ""),  # kernel settings, not a card (TCPXO's daemon)
    ("/usr/local/vgpu", True, ""),
    ("/run/tcpx", False, ""),
    ("/tmp/nvidia-mps", False, ""),
    ("/home", False, "jovyan"),
    ("/data/models", False, ""),
]


@pytest.mark.parametrize(("path", "read_only", "sub_path"), MOUNTS_ADMITTED)
def test_a_mount_that_reaches_nothing_of_the_cards_is_admitted(
    path: str, read_only: bool | None, sub_path: str
) -> None:
    admitted(mounting(path, read_only, sub_path))


def test_a_host_path_volume_no_container_mounts_is_admitted() -> None:
    """Ray's worker templates declare volumes their containers may not mount."""
    admitted(gpu_pod(volumes=[{"name": "dev", "hostPath": {"path": "/dev"}}]))


def test_a_writable_mount_of_the_configured_hook_folder_is_refused() -> None:
    pod = mounting("/opt", None)
    admitted(pod)  # /opt is nothing of the default installation
    cfg = AdmissionConfig(
        injection=InjectionConfig(mode="standalone", hook_path="/opt/hami"), families=FAMILIES
    )
    assert "HAMi-core's libvgpu.so" in refused(pod, cfg)


def test_a_mount_under_a_sidecar_or_init_container_is_judged_too() -> None:
    pod = gpu_pod(
        {"name": "rxdm", "image": "x", "volumeMounts": [{"name": "s", "mountPath": "/s"}]}
    )
    pod["spec"]["volumes"] = [{"name": "s", "hostPath": {"path": "/sys"}}]
    assert "container rxdm mounts volume s (spec.containers[1].volumeMounts[0])" in refused(pod)
    pod["spec"]["containers"][1]["volumeMounts"][0]["readOnly"] = True
    admitted(pod)


def test_standalone_injection_passes_its_own_output_again() -> None:
    """Its cache mount is writable inside the hook folder, the container's own subfolder."""
    for cfg in (STANDALONE, GKE_STANDALONE):
        once = admitted(gpu_pod(), cfg)
        assert admitted(once, cfg) == once


def test_a_cache_mount_that_names_another_pods_folder_is_refused() -> None:
    once = admitted(gpu_pod(), STANDALONE)
    forged = copy.deepcopy(once)
    env = forged["spec"]["containers"][0]["env"]
    uid = next(e for e in env if e["name"] == "HAMI_POD_UID")
    uid.pop("valueFrom")
    uid["value"] = "another-pods-uid"
    message = refused(forged, STANDALONE)
    assert "hostPath /usr/local/vgpu/containers, writable: HAMi-core's" in message


# --- annotations, hostPID, capabilities ----------------------------------------------------


@pytest.mark.parametrize(
    ("key", "who"),
    [
        ("cdi.k8s.io/x", "the container runtime (CDI)"),
        ("nvidia.cdi.k8s.io/container.cuda", "the container runtime (CDI)"),
        ("devices.gke.io/container.tcpxo-daemon", "GKE's NRI device injector"),
    ],
)
def test_annotations_the_runtime_turns_into_devices_are_refused(key: str, who: str) -> None:
    pod = gpu_pod()
    pod["metadata"]["annotations"] = {key: "management.nvidia.com/gpu=all"}
    message = refused(pod)
    assert f"annotation {key} asks {who} for devices (management.nvidia.com/gpu=all)" in message
    pod["metadata"]["annotations"] = {"example.com/cdi.k8s.io": "x", "gke.io/devices": "x"}
    admitted(pod)


def test_host_pid_is_refused_with_or_without_sys_ptrace() -> None:
    assert "spec.hostPID is true: the pod sees every process" in refused(gpu_pod(hostPID=True))
    pod = gpu_pod(hostPID=False)
    pod["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": ["SYS_PTRACE"]}}
    admitted(pod)  # its own processes only


@pytest.mark.parametrize(
    ("capability", "says"),
    [
        ("SYS_RAWIO", "port I/O and /proc/bus/pci, which reach the PCI config space"),
        ("CAP_SYS_ADMIN", "undo the read-only mounts of libvgpu.so"),
        ("SYS_MODULE", "the GPU driver's among them"),
        ("all", "every capability"),
    ],
)
def test_each_capability_refused_names_what_it_reaches(capability: str, says: str) -> None:
    pod = gpu_pod()
    pod["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": [capability]}}
    message = refused(pod)
    assert f"adds {capability} (spec.containers[0].securityContext.capabilities.add)" in message
    assert says in message and message.endswith("remove it")


# --- pins and envFrom ----------------------------------------------------------------------


def test_every_gpu_pod_leaves_with_its_pins() -> None:
    sidecar = {"name": "log", "image": "cuda-base"}
    init = {
        "name": "fetch",
        "image": "x",
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
    }
    out = admitted(gpu_pod(sidecar, initContainers=[init]))
    cuda, log = out["spec"]["containers"]
    assert SLICE in cuda["env"] and not any(
        e["name"] == "NVIDIA_VISIBLE_DEVICES" for e in cuda["env"]
    )
    assert log["env"] == SIDECAR_PINS
    assert out["spec"]["initContainers"][0]["env"] == [*init["env"], NO_SWITCHES], "kept"
    # Without --overwrite-env the GPU-less containers keep what their image says.
    assert "env" not in admitted(gpu_pod(sidecar), NO_OVERWRITE)["spec"]["containers"][1]


def test_a_capability_list_the_author_wrote_is_kept() -> None:
    pod = gpu_pod()
    pod["spec"]["containers"][0]["env"] = [
        {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute"}
    ]
    assert admitted(pod)["spec"]["containers"][0]["env"] == [
        *pod["spec"]["containers"][0]["env"],
        NO_CHANNELS,
        NO_SWITCHES,
    ]


def test_a_pod_without_gpu_resources_gets_no_pins() -> None:
    pod = {"metadata": {"name": "c"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    assert admitted(pod) == pod


def test_env_from_without_a_prefix_is_admitted_where_a_pin_covers_it() -> None:
    pod = gpu_pod({"name": "proxy", "image": "x", "envFrom": [SETTINGS]})
    assert admitted(pod)["spec"]["containers"][1]["env"] == SIDECAR_PINS
    gpu_env_from = gpu_pod()
    gpu_env_from["spec"]["containers"][0]["envFrom"] = [SETTINGS, {"secretRef": {"name": "hf"}}]
    for cfg in (STANDALONE, GKE_STANDALONE):
        admitted(gpu_env_from, cfg)  # the injection's own NVIDIA_VISIBLE_DEVICES reference


@pytest.mark.parametrize(
    ("pod", "cfg", "says"),
    [
        # The device plugin's value is not known at admission, and an envFrom key beats it.
        (
            {
                **gpu_pod(),
                "spec": {
                    "containers": [{**gpu_pod()["spec"]["containers"][0], "envFrom": [SETTINGS]}]
                },
            },
            CFG,
            "takes every variable of ConfigMap settings (spec.containers[0].envFrom[0]) and "
            "nothing pins NVIDIA_VISIBLE_DEVICES in it",
        ),
        (
            gpu_pod({"name": "proxy", "image": "x", "envFrom": [SETTINGS]}),
            NO_OVERWRITE,
            "container proxy takes every variable of ConfigMap settings",
        ),
        (
            gpu_pod(
                {
                    "name": "proxy",
                    "image": "x",
                    "envFrom": [{"secretRef": {"name": "s"}, "prefix": "NVIDIA_"}],
                }
            ),
            NO_OVERWRITE,
            "Secret s (spec.containers[1].envFrom[0], prefix NVIDIA_)",
        ),
    ],
)
def test_env_from_that_no_pin_covers_is_refused_with_a_fix_that_works(
    pod: dict[str, Any], cfg: AdmissionConfig, says: str
) -> None:
    message = refused(pod, cfg)
    assert says in message, message
    assert "each with valueFrom.configMapKeyRef or secretKeyRef" in message
    assert "exempt its namespace (label hami.io/webhook=ignore)" in message


def test_a_foreign_gpu_pods_env_from_is_judged_against_its_own_entries() -> None:
    pod = gpu_pod({"name": "proxy", "image": "x", "envFrom": [SETTINGS]}, schedulerName="volcano")
    assert admitted(pod)["spec"]["containers"][1]["env"] == SIDECAR_PINS
    pod["spec"]["containers"][0]["envFrom"] = [SETTINGS]
    assert "container cuda takes every variable" in refused(pod)


def test_ephemeral_containers_are_pinned_and_the_service_patches_them() -> None:
    running = gpu_pod(nodeName="gpu-07")
    debug = {"name": "debug", "image": "nvidia/cuda", "envFrom": [SETTINGS]}
    updated = copy.deepcopy(running)
    updated["spec"]["ephemeralContainers"] = [debug]
    verdict = admit_ephemeral(updated, running, CFG)
    assert verdict.allowed and verdict.pod["spec"]["ephemeralContainers"][0]["env"] == SIDECAR_PINS
    outcome = AdmissionService(CFG).review(
        {
            "uid": "u",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "UPDATE",
            "subResource": "ephemeralcontainers",
            "object": updated,
            "oldObject": running,
        }
    )
    assert outcome.allowed and outcome.patch == [
        {"op": "add", "path": "/spec/ephemeralContainers/0/env", "value": SIDECAR_PINS}
    ]
    assert not admit_ephemeral(updated, running, NO_OVERWRITE).allowed


# --- every way a pod becomes a GPU pod -----------------------------------------------------

ESCAPES: dict[str, tuple[dict[str, Any], str]] = {
    "privileged": ({"securityContext": {"privileged": True}}, "is privileged"),
    "visible-all": (
        {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
        "sets NVIDIA_VISIBLE_DEVICES=all",
    ),
    "sys-admin": ({"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}, "adds SYS_ADMIN"),
    "host-dev": ({"volumeMounts": [{"name": "dev", "mountPath": "/host-dev"}]}, "hostPath /dev"),
}
SHARES = {"gpu-fraction": "0.5", "gpu-memory": "2000"}
SCHEDULERS = ("", "hami-scheduler", "default-scheduler", "kai-scheduler")


def kai_pod(share: str, scheduler: str, escape: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "worker", "image": "x", **copy.deepcopy(escape)}],
        "volumes": [{"name": "dev", "hostPath": {"path": "/dev"}}],
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"metadata": {"name": "k", "annotations": {share: SHARES[share]}}, "spec": spec}


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("share", sorted(SHARES))
@pytest.mark.parametrize("escape", sorted(ESCAPES))
def test_a_pod_translated_from_a_kai_share_passes_the_same_checks(
    escape: str, share: str, scheduler: str
) -> None:
    """Without the chart's matchConditions such pods reach the webhook whatever they name; each
    leaves as a GPU pod, so each is held to the checks."""
    fields, says = ESCAPES[escape]
    assert says in refused(kai_pod(share, scheduler, fields))
    plain = admitted(kai_pod(share, scheduler, {}))
    worker = plain["spec"]["containers"][0]
    assert "nvidia.com/gpu" in worker["resources"]["limits"] and SLICE in worker["env"]


def test_a_container_given_a_default_card_passes_the_same_checks() -> None:
    """default_gpu_num turns a container that asks for memory only into a GPU container."""
    pod = gpu_pod()
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpumem": 1000}}
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert "is privileged" in refused(pod)


def test_the_pins_are_idempotent() -> None:
    pod = gpu_pod({"name": "proxy", "image": "x"})
    for cfg in (CFG, STANDALONE, GKE_STANDALONE):
        once = admitted(pod, cfg)
        assert diff(once, admitted(once, cfg)) == []
