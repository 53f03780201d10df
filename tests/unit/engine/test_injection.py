"""Admission-time injection: driver libraries, standalone vGPU plumbing, KAI requests."""

from typing import Any

import pytest

from hami.engine.admission import AdmissionConfig, admit
from hami.engine.injection import (
    CONFIG_ANNOTATION,
    InjectionConfig,
    InjectionError,
    config_data,
    driver_profile,
)
from hami.engine.jsonpatch import diff
from hami.engine.model import ContainerDevice
from tests.builders import FAMILIES

GKE = AdmissionConfig(injection=InjectionConfig(driver=driver_profile("gke")), families=FAMILIES)
STANDALONE = AdmissionConfig(
    injection=InjectionConfig(
        mode="standalone",
        driver=driver_profile("gke"),
        hook_path="/home/kubernetes/bin/nvidia/vgpu",
    ),
    families=FAMILIES,
)


def pod(
    *containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), **meta: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {"metadata": {"name": "p", **meta}, "spec": spec}


def gpu(name: str = "cuda", mem: int = 1000, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mem}},
        **extra,
    }


def plain(name: str = "sidecar") -> dict[str, Any]:
    return {"name": name, "image": "busybox"}


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def mounts(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["mountPath"]: m for m in container.get("volumeMounts", [])}


def test_gke_profile_mounts_driver_lib64_and_sets_library_path_on_gpu_containers_only() -> None:
    out = admit(pod(gpu(), plain(), init=(plain("setup"),)), GKE).pod
    cuda, sidecar = out["spec"]["containers"]
    assert mounts(cuda)["/usr/local/nvidia/lib64"] == {
        "name": "hami-driver-lib64",
        "mountPath": "/usr/local/nvidia/lib64",
        "readOnly": True,
    }
    assert env(cuda)["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert {
        "name": "hami-driver-lib64",
        "hostPath": {"path": "/home/kubernetes/bin/nvidia/lib64", "type": "Directory"},
    } in out["spec"]["volumes"]
    # The sidecar gets no driver, only the pin that keeps its image from naming cards.
    assert "volumeMounts" not in sidecar and env(sidecar) == {
        "NVIDIA_VISIBLE_DEVICES": "none",
        "NVIDIA_NVSWITCH": "disabled",
    }
    assert "volumeMounts" not in out["spec"]["initContainers"][0]


def test_init_container_with_gpu_gets_the_driver_too() -> None:
    out = admit(pod(plain(), init=(gpu("warmup"),)), GKE).pod
    assert "/usr/local/nvidia/lib64" in mounts(out["spec"]["initContainers"][0])
    assert "volumeMounts" not in out["spec"]["containers"][0]


@pytest.mark.parametrize(
    ("existing", "expected"),
    [
        ("/opt/lib", "/opt/lib:/usr/local/nvidia/lib64"),
        ("/usr/local/nvidia/lib64", "/usr/local/nvidia/lib64"),
        ("/a:/usr/local/nvidia/lib64:/b", "/a:/usr/local/nvidia/lib64:/b"),
    ],
)
def test_existing_library_path_is_kept_and_extended_never_duplicated(
    existing: str, expected: str
) -> None:
    out = admit(pod(gpu(env=[{"name": "LD_LIBRARY_PATH", "value": existing}])), GKE).pod
    assert env(out["spec"]["containers"][0])["LD_LIBRARY_PATH"] == expected


def test_hand_written_lab14_mount_is_not_injected_twice() -> None:
    hand = gpu(
        volumeMounts=[
            {"name": "nvidia-lib64", "mountPath": "/usr/local/nvidia/lib64", "readOnly": True}
        ],
        env=[{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}],
    )
    p = pod(hand)
    p["spec"]["volumes"] = [
        {"name": "nvidia-lib64", "hostPath": {"path": "/home/kubernetes/bin/nvidia/lib64"}}
    ]
    out = admit(p, GKE).pod
    assert len(out["spec"]["containers"][0]["volumeMounts"]) == 1
    assert [v["name"] for v in out["spec"]["volumes"]] == ["nvidia-lib64"]


def test_standalone_injects_library_preload_cache_and_required_limits() -> None:
    out = admit(pod(gpu(mem=4096)), STANDALONE).pod
    c = out["spec"]["containers"][0]
    config = out["metadata"]["annotations"][CONFIG_ANNOTATION]
    assert config == "p-hami-vgpu"
    m = mounts(c)
    assert m["/usr/local/vgpu/libvgpu.so"]["readOnly"] is True
    assert m["/etc/ld.so.preload"] == {
        "name": "hami-vgpu-config",
        "mountPath": "/etc/ld.so.preload",
        "subPath": "ld.so.preload",
        "readOnly": True,
    }
    assert m["/usr/local/vgpu/cache"]["subPathExpr"] == "$(HAMI_POD_UID)_cuda"
    assert "/tmp/vgpulock" in m
    volumes = {v["name"]: v for v in out["spec"]["volumes"]}
    assert volumes["hami-vgpu-lib"]["hostPath"] == {
        "path": "/home/kubernetes/bin/nvidia/vgpu/libvgpu.so",
        "type": "File",
    }
    assert volumes["hami-vgpu-config"]["configMap"] == {"name": config, "optional": False}
    e = env(c)
    assert e["CUDA_DEVICE_MEMORY_LIMIT_0"] == {
        "configMapKeyRef": {
            "name": config,
            "key": "cuda.CUDA_DEVICE_MEMORY_LIMIT_0",
            "optional": False,
        }
    }
    assert e["NVIDIA_VISIBLE_DEVICES"]["configMapKeyRef"]["key"] == "cuda.NVIDIA_VISIBLE_DEVICES"
    assert e["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/usr/local/vgpu/cache/usage.cache"
    assert e["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"


def test_generate_name_pods_name_their_config_from_the_request() -> None:
    p = pod(gpu())
    del p["metadata"]["name"]
    p["metadata"]["generateName"] = "job-"
    out = admit(p, STANDALONE, "hami-vgpu-1234").pod
    assert out["metadata"]["annotations"][CONFIG_ANNOTATION] == "hami-vgpu-1234"


@pytest.mark.parametrize("cfg", [GKE, STANDALONE])
def test_injection_is_idempotent(cfg: AdmissionConfig) -> None:
    once = admit(pod(gpu(), plain(), init=(gpu("warm"),)), cfg).pod
    assert diff(once, admit(once, cfg).pod) == []


def test_config_data_has_exact_limits_per_container() -> None:
    devices = (
        (),
        (ContainerDevice("GPU-a", 4096, 0),),
        (ContainerDevice("GPU-a", 1000, 30), ContainerDevice("GPU-b", 1000, 30)),
    )
    data = config_data(["init", "a", "b"], devices)
    assert data == {
        "ld.so.preload": "/usr/local/vgpu/libvgpu.so\n",
        "a.CUDA_DEVICE_MEMORY_LIMIT_0": "4096m",
        "a.CUDA_DEVICE_SM_LIMIT": "0",
        "a.NVIDIA_VISIBLE_DEVICES": "GPU-a",
        "b.CUDA_DEVICE_MEMORY_LIMIT_0": "1000m",
        "b.CUDA_DEVICE_MEMORY_LIMIT_1": "1000m",
        "b.CUDA_DEVICE_SM_LIMIT": "30",
        "b.NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b",
    }


def test_profiles_and_modes_are_validated() -> None:
    with pytest.raises(InjectionError, match="valid: gke, generic, none"):
        driver_profile("gce")
    with pytest.raises(InjectionError, match="host and container"):
        driver_profile("generic", "/usr/lib/nvidia")
    with pytest.raises(InjectionError, match="valid: hami-device-plugin, standalone"):
        InjectionConfig(mode="kai")
    assert driver_profile("generic", "/a", "/b").container_lib == "/b"


def kai_pod(
    annotations: dict[str, str], scheduler: str = "kai-scheduler", **container: Any
) -> dict[str, Any]:
    c = {"name": "cuda", "image": "cuda", **container}
    return {
        "metadata": {"name": "k", "annotations": annotations},
        "spec": {"schedulerName": scheduler, "containers": [c]},
    }


@pytest.mark.parametrize(
    ("annotations", "limits"),
    [
        ({"gpu-memory": "4096"}, {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4096}),
        ({"gpu-fraction": "0.5"}, {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 50}),
        (
            {"gpu-fraction": "0.27", "gpu-fraction-num-devices": "2"},
            {"nvidia.com/gpu": 2, "nvidia.com/gpumem-percentage": 27},
        ),
    ],
)
def test_kai_requests_become_ours_and_the_pod_is_adopted(
    annotations: dict[str, str], limits: dict[str, int]
) -> None:
    a = admit(kai_pod(annotations), AdmissionConfig(families=FAMILIES))
    assert a.allowed, a.message
    assert a.pod["spec"]["schedulerName"] == "hami-scheduler"
    assert a.pod["spec"]["containers"][0]["resources"]["limits"] == limits
    assert not set(a.pod["metadata"]["annotations"]) & {
        "gpu-memory",
        "gpu-fraction",
        "gpu-fraction-num-devices",
    }
    assert diff(a.pod, admit(a.pod, AdmissionConfig(families=FAMILIES)).pod) == []


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({"gpu-memory": "4096", "gpu-fraction": "0.5"}, "not both"),
        ({"gpu-memory": "4Gi"}, "positive whole number of MiB"),
        ({"gpu-fraction": "1.5"}, "between 0 and 1"),
        ({"gpu-fraction": "0.001"}, "below 1%"),
        (
            {"gpu-fraction": "0.5", "gpu-fraction-container-name": "nope"},
            "no container named 'nope'",
        ),
        ({"gpu-memory": "1000", "gpu-fraction-num-devices": "zero"}, "whole number"),
    ],
)
def test_bad_kai_requests_are_denied(annotations: dict[str, str], message: str) -> None:
    a = admit(kai_pod(annotations), AdmissionConfig(families=FAMILIES))
    assert not a.allowed and message in a.message


def test_kai_share_with_gpu_limit_is_denied() -> None:
    a = admit(
        kai_pod({"gpu-fraction": "0.5"}, resources={"limits": {"nvidia.com/gpu": 1}}),
        AdmissionConfig(families=FAMILIES),
    )
    assert not a.allowed and "keep one of them" in a.message


def test_kai_pod_without_share_stays_with_kai() -> None:
    a = admit(kai_pod({}), AdmissionConfig(families=FAMILIES))
    assert a.pod["spec"]["schedulerName"] == "kai-scheduler"


def test_ignore_label_leaves_pod_untouched_but_for_the_pins() -> None:
    p = pod(gpu(), labels={"hami.io/webhook": "ignore"})
    assert diff(p, admit(p, GKE).pod) == [
        {
            "op": "add",
            "path": "/spec/containers/0/env",
            "value": [
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
                {"name": "NVIDIA_IMEX_CHANNELS", "value": "void"},
                {"name": "NVIDIA_NVSWITCH", "value": "disabled"},
            ],
        }
    ]


@pytest.mark.parametrize(
    ("shape", "denied"),
    [
        (gpu(securityContext={"privileged": True}), "is privileged"),
        ({"name": "c", "resources": {"limits": {"nvidia.com/gpu": 65}}}, "at most 64"),
        ({"name": "c", "resources": {"limits": {"nvidia.com/gpumem": "lots"}}}, "lots"),
    ],
)
def test_ignore_label_spares_the_mutation_not_the_denials(
    shape: dict[str, Any], denied: str
) -> None:
    a = admit(pod(shape, labels={"hami.io/webhook": "ignore"}), GKE)
    assert not a.allowed and denied in a.message
    forged = pod(
        plain(),
        labels={"hami.io/webhook": "ignore"},
        annotations={"hami.io/vgpu-devices-allocated": "GPU-x,NVIDIA,1,0:;"},
    )
    assert not admit(forged, GKE).allowed


def test_ignore_label_leaves_a_plain_pod_untouched_too() -> None:
    p = pod(plain(), labels={"hami.io/webhook": "ignore"})
    assert diff(p, admit(p, AdmissionConfig(overwrite_env=True, families=FAMILIES)).pod) == []
