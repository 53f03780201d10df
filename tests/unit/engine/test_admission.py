import copy
from typing import Any

import pytest

from hami.engine.admission import AdmissionConfig, admit
from hami.engine.families.nvidia.family import NvidiaFamily
from hami.engine.jsonpatch import apply, diff
from hami.engine.requests import ResourceDefaults
from tests.builders import FAMILIES, container, submitted_pod

CFG = AdmissionConfig(families=FAMILIES)


def pod(limits: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """submitted_pod of one container, named main as the refusals quote it."""
    return submitted_pod(container(limits, "main"), **spec)


def test_gpu_pod_gets_our_scheduler() -> None:
    a = admit(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}), CFG)
    assert a.allowed and a.pod["spec"]["schedulerName"] == "hami-scheduler"
    assert "nvidia.com/gpucores" not in a.pod["spec"]["containers"][0]["resources"]["limits"]


@pytest.mark.parametrize(
    ("limits", "cores"),
    [
        ({"nvidia.com/gpu": 1}, "100"),  # whole card memory -> exclusive cores
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 100}, "100"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 50}, None),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 30}, 30),
    ],
)
def test_exclusive_memory_defaults_cores(limits: dict[str, Any], cores: object) -> None:
    a = admit(pod(limits), CFG)
    assert a.pod["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpucores") == cores


def test_memory_without_count_gets_default_gpu_number() -> None:
    a = admit(pod({"nvidia.com/gpumem": 2000}), CFG)
    assert a.pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_non_gpu_pod_is_left_alone() -> None:
    p = pod({"cpu": "1"})
    a = admit(p, CFG)
    assert a.allowed and diff(p, a.pod) == []


@pytest.mark.parametrize(
    ("scheduler", "ours"),
    [("", True), ("default-scheduler", True), ("hami-scheduler", True), ("volcano", False)],
)
def test_other_schedulers_are_respected(scheduler: str, ours: bool) -> None:
    p = pod({"nvidia.com/gpu": 1}, schedulerName=scheduler)
    a = admit(p, CFG)
    assert a.allowed
    assert (a.pod["spec"].get("schedulerName") == "hami-scheduler") is ours


def test_default_scheduler_kept_without_force_overwrite() -> None:
    cfg = AdmissionConfig(force_overwrite_default_scheduler=False, families=FAMILIES)
    a = admit(pod({"nvidia.com/gpu": 1}, schedulerName="default-scheduler"), cfg)
    assert a.pod["spec"]["schedulerName"] == "default-scheduler"


@pytest.mark.parametrize(
    ("p", "message"),
    [
        ({"metadata": {"name": "x"}, "spec": {"containers": []}}, "pod has no containers"),
        (pod({"nvidia.com/gpu": 1}, nodeName="n1"), "spec.nodeName is set (n1)"),
        (
            pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 120}),
            "invalid nvidia.com/gpumem-percentage value 120 in container main",
        ),
        (
            pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "lots"}),
            "container main: nvidia.com/gpumem",
        ),
        (pod({"nvidia.com/gpu": "half"}), "container main: nvidia.com/gpu"),
        (
            pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "2G"}),
            "nvidia.com/gpumem '2G' is 1907.35 MiB, not a whole number of MiB: write the MiB "
            "without a suffix (e.g. 1907), or use Mi or Gi",
        ),
    ],
)
def test_denials(p: dict[str, Any], message: str) -> None:
    a = admit(p, CFG)
    assert not a.allowed and a.code == 403
    assert message in a.message


def test_privileged_gpu_pod_is_denied() -> None:
    p = pod({"nvidia.com/gpu": 1})
    p["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert admit(p, CFG).message.startswith("GPU pod refused: container main is privileged")
    q = pod({"cpu": 1})
    q["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert admit(q, CFG).allowed


def test_unknown_policy_is_denied_with_valid_names() -> None:
    p = pod({"nvidia.com/gpu": 1})
    p["metadata"]["annotations"] = {"hami.io/gpu-scheduler-policy": "binpak"}
    a = admit(p, CFG)
    assert (
        not a.allowed and "valid names: binpack, spread, numa, mutex, topology-aware" in a.message
    )


def test_numa_bind_hami_cannot_parse_is_admitted_with_numa_binding_off() -> None:
    p = pod({"nvidia.com/gpu": 1})
    p["metadata"]["annotations"] = {"nvidia.com/numa-bind": "yes"}
    assert admit(p, CFG).allowed  # as HAMi v2.10: strconv.ParseBool fails, binding off


@pytest.mark.parametrize(
    "key", ["hami.io/vgpu-devices-allocated", "hami.io/vgpu-node", "hami.io/bind-phase"]
)
def test_forged_scheduler_annotations_are_denied(key: str) -> None:
    p = pod({"nvidia.com/gpu": 1})
    p["metadata"]["annotations"] = {key: "GPU-x,NVIDIA,1,0:;"}
    a = admit(p, CFG)
    assert not a.allowed and key in a.message and "scheduler only" in a.message


def test_priority_and_core_policy_env_are_added_once() -> None:
    cfg = AdmissionConfig(
        gpu_core_policy="force",
        families=FAMILIES.replacing(NvidiaFamily(ResourceDefaults(), "force")),
    )
    p = pod({"nvidia.com/gpu": 1, "nvidia.com/priority": 1})
    once = admit(p, cfg).pod
    env = once["spec"]["containers"][0]["env"]
    assert {"name": "CUDA_TASK_PRIORITY", "value": "1"} in env
    assert {"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"} in env
    assert admit(once, cfg).pod == once


def test_admission_is_idempotent_and_its_patch_reproduces_it() -> None:
    p = pod({"nvidia.com/gpu": 1})
    first = admit(p, CFG).pod
    patch = diff(p, first)
    assert patch and apply(p, patch) == first
    assert diff(first, admit(copy.deepcopy(first), CFG).pod) == []


def test_jsonpatch_escapes_and_list_growth() -> None:
    old = {"a": {"x/y": 1}, "l": [1, 2]}
    new = {"a": {"x/y": 2, "m~n": 3}, "l": [1, 2, 3]}
    patch = diff(old, new)
    assert {"op": "replace", "path": "/a/x~1y", "value": 2} in patch
    assert {"op": "add", "path": "/a/m~0n", "value": 3} in patch
    assert {"op": "add", "path": "/l/-", "value": 3} in patch
    assert apply(old, patch) == new
    assert apply(new, diff(new, old)) == old


def test_forged_allocation_is_denied_for_pods_of_other_schedulers_too() -> None:
    p = pod({"cpu": "1"}, schedulerName="volcano")
    p["metadata"]["annotations"] = {
        "hami.io/vgpu-node": "n1",
        "hami.io/vgpu-devices-allocated": "GPU-x,NVIDIA,1,0:;",
    }
    a = admit(p, CFG)
    assert not a.allowed and "hami.io/vgpu-devices-allocated, hami.io/vgpu-node" in a.message
