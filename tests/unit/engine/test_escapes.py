"""Every way out of a GPU slice or past the scheduler's count is refused at admission, for every
GPU pod whoever schedules it; the same fields in a pod without GPU resources are not ours."""

import copy
import posixpath
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.engine.admission import AdmissionConfig, admit, admit_ephemeral
from hami.engine.escapes import pod_escapes
from hami.engine.families.nvidia.family import NvidiaFamily
from hami.engine.hostpaths import HostFolders, mount_reach, reaches_devices
from hami.engine.injection import InjectionConfig
from hami.engine.requests import ResourceDefaults, ResourceNames, names_gpu
from hami.service.admission import AdmissionService
from tests.builders import FAMILIES, submitted_gpu_pod

CFG = AdmissionConfig(families=FAMILIES)
STANDALONE = AdmissionConfig(injection=InjectionConfig(mode="standalone"), families=FAMILIES)


def with_sidecar(**container: Any) -> dict[str, Any]:
    p = submitted_gpu_pod()
    p["spec"]["containers"].append({"name": "sidecar", "image": "x", **container})
    return p


def in_gpu_container(**container: Any) -> dict[str, Any]:
    p = submitted_gpu_pod()
    p["spec"]["containers"][0].update(container)
    return p


def in_init(**container: Any) -> dict[str, Any]:
    return submitted_gpu_pod(initContainers=[{"name": "setup", "image": "x", **container}])


def env(name: str, value: str) -> dict[str, Any]:
    return {"env": [{"name": name, "value": value}]}


def host_path(path: str) -> dict[str, Any]:
    p = submitted_gpu_pod(volumes=[{"name": "host", "hostPath": {"path": path}}])
    p["spec"]["containers"][0]["volumeMounts"] = [{"name": "host", "mountPath": "/host"}]
    return p


def mounting(volume: dict[str, Any], path: str, container: int = 0, **mount: Any) -> dict[str, Any]:
    """A GPU pod (with a sidecar, container 1) whose container mounts `volume` at `path`."""
    p = with_sidecar()
    p["spec"]["volumes"] = [{"name": "v", **volume}]
    p["spec"]["containers"][container]["volumeMounts"] = [{"name": "v", "mountPath": path, **mount}]
    return p


def labelled(pod: dict[str, Any], **labels: str) -> dict[str, Any]:
    pod["metadata"]["labels"] = labels
    return pod


def other_scheduler(pod: dict[str, Any], name: str = "other") -> dict[str, Any]:
    pod["spec"]["schedulerName"] = name
    return pod


PRIVILEGED = {"securityContext": {"privileged": True}}
SYS_ADMIN = {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}
CONFIG_MAP_ENV = {
    "env": [
        {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {"configMapKeyRef": {"name": "mine", "key": "devices"}},
        }
    ]
}

REFUSED = [
    # (pod, what the denial must say: the field and the fix)
    (submitted_gpu_pod(nodeName="gpu-07"), "spec.nodeName is set (gpu-07)"),
    (
        labelled(submitted_gpu_pod(nodeName="gpu-07"), **{"hami.io/webhook": "ignore"}),
        "remove spec.nodeName",
    ),
    (other_scheduler(submitted_gpu_pod(nodeName="gpu-07")), "spec.nodeName is set"),
    (other_scheduler(in_gpu_container(**PRIVILEGED)), "spec.containers[0].securityContext"),
    (labelled(in_gpu_container(**PRIVILEGED), **{"hami.io/webhook": "ignore"}), "is privileged"),
    (with_sidecar(**PRIVILEGED), "container sidecar is privileged"),
    (in_init(**PRIVILEGED), "spec.initContainers[0].securityContext.privileged"),
    (in_gpu_container(**SYS_ADMIN), "adds SYS_ADMIN"),
    (
        with_sidecar(securityContext={"capabilities": {"add": ["CAP_SYS_ADMIN", "NET_ADMIN"]}}),
        "adds CAP_SYS_ADMIN (spec.containers[1].securityContext.capabilities.add)",
    ),
    (in_init(securityContext={"capabilities": {"add": ["sys_rawio"]}}), "adds sys_rawio"),
    (in_gpu_container(securityContext={"capabilities": {"add": ["ALL"]}}), "remove it"),
    (in_gpu_container(securityContext={"capabilities": {"add": ["SYS_MODULE"]}}), "SYS_MODULE"),
    (
        host_path("/dev"),
        "(spec.containers[0].volumeMounts[0]), hostPath /dev, writable: the device",
    ),
    (host_path("/dev/nvidia0"), "remove the mount (the device plugin adds the pod's own cards)"),
    (host_path("/dev/nvidiactl"), "/dev/nvidiactl"),
    (host_path("//dev/./nvidia-uvm/"), "the device nodes of every card on the node"),
    (host_path("/"), "hostPath /, writable"),
    (host_path("/sys"), "hostPath /sys, writable: the PCI config space and memory (BARs)"),
    (host_path("/dev/dri"), "/dev/dri"),
    (other_scheduler(host_path("/dev")), "/dev"),
    (with_sidecar(**env("NVIDIA_VISIBLE_DEVICES", "all")), "sets NVIDIA_VISIBLE_DEVICES=all"),
    (
        in_gpu_container(**env("NVIDIA_VISIBLE_DEVICES", "0,1,2,3")),
        "(spec.containers[0].env[0]): the NVIDIA runtime would expose",
    ),
    (in_init(**env("NVIDIA_VISIBLE_DEVICES", "GPU-1234")), "spec.initContainers[0].env[0]"),
    (with_sidecar(**env("NVIDIA_MIG_CONFIG_DEVICES", "all")), "NVIDIA_MIG_CONFIG_DEVICES=all"),
    (with_sidecar(**CONFIG_MAP_ENV), "reads NVIDIA_VISIBLE_DEVICES from elsewhere"),
    (
        in_gpu_container(**env("NVIDIA_DRIVER_CAPABILITIES", "all")),
        "NVIDIA_DRIVER_CAPABILITIES=all (spec.containers[0].env[0]): all reach the card",
    ),
    (
        with_sidecar(**env("NVIDIA_DRIVER_CAPABILITIES", "compute,utility,graphics,video")),
        "graphics, video reach the card",
    ),
    (
        with_sidecar(
            volumeMounts=[{"name": "x", "mountPath": "/var/run/nvidia-container-devices/all"}]
        ),
        "mounts /var/run/nvidia-container-devices/all (spec.containers[1].volumeMounts[0])",
    ),
    (
        {
            **submitted_gpu_pod(),
            "metadata": {"name": "p", "annotations": {"cdi.k8s.io/x": "nvidia.com/gpu=all"}},
        },
        "annotation cdi.k8s.io/x asks the container runtime (CDI) for devices",
    ),
    (
        submitted_gpu_pod(ephemeralContainers=[{"name": "debug", "image": "x", **PRIVILEGED}]),
        "spec.ephemeralContainers[0].securityContext.privileged",
    ),
    # Issue 39: the channels still open.
    (
        in_gpu_container(securityContext={"capabilities": {"add": ["DAC_READ_SEARCH"]}}),
        "adds DAC_READ_SEARCH (spec.containers[0].securityContext.capabilities.add): "
        "open_by_handle_at",
    ),
    (
        with_sidecar(securityContext={"capabilities": {"add": ["CAP_DAC_READ_SEARCH"]}}),
        "open_by_handle_at, which opens any file of a host filesystem",
    ),
    (
        in_gpu_container(**env("NVIDIA_IMEX_CHANNELS", "0")),
        "NVIDIA_IMEX_CHANNELS=0 (spec.containers[0].env[0]): the NVIDIA runtime would add the "
        "IMEX channels",
    ),
    (with_sidecar(**env("NVIDIA_IMEX_CHANNELS", "all")), "another compute domain exported"),
    (
        with_sidecar(**env("NVIDIA_NVSWITCH", "enabled")),
        "NVIDIA_NVSWITCH=enabled (spec.containers[1].env[0]): the NVIDIA runtime would add the "
        "NVSwitch device nodes",
    ),
    (
        in_gpu_container(**env("CUDA_DEVICE_MEMORY_LIMIT_0", "80g")),
        "sets CUDA_DEVICE_MEMORY_LIMIT_0 (spec.containers[0].env[0]), a limit HAMi-core holds",
    ),
    (in_gpu_container(**env("CUDA_DEVICE_SM_LIMIT", "100")), "sets CUDA_DEVICE_SM_LIMIT ("),
    (in_gpu_container(**env("CUDA_DEVICE_SM_LIMIT_0", "100")), "sets CUDA_DEVICE_SM_LIMIT_0 ("),
    (in_gpu_container(**env("CUDA_DEVICE_MEMORY_LIMIT", "80g")), "CUDA_DEVICE_MEMORY_LIMIT ("),
    (
        in_gpu_container(**env("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/mine.cache")),
        "a process with a file of its own is counted alone",
    ),
    (in_gpu_container(**env("CUDA_REDIRECT", "/usr/lib/libcuda.so.1")), "the real one bypasses"),
    (
        in_gpu_container(**env("CUDA_DISABLE_CONTROL", "true")),
        "CUDA_DISABLE_CONTROL=true (spec.containers[0].env[0]): HAMi's device plugin then leaves "
        "HAMi-core out",
    ),
    (
        in_gpu_container(**env("GPU_CORE_UTILIZATION_POLICY", "disable")),
        "limits its cores less than the scheduler's policy (default)",
    ),
    (
        mounting({"configMap": {"name": "preload"}}, "/etc/ld.so.preload", subPath="preload"),
        "mounts volume v at /etc/ld.so.preload (spec.containers[0].volumeMounts[0]), where "
        "the node side mounts HAMi-core",
    ),
    (
        mounting({"emptyDir": {}}, "/usr/local/vgpu/libvgpu.so", subPath="lib"),
        "at /usr/local/vgpu/libvgpu.so",
    ),
    (
        mounting({"emptyDir": {}}, "/usr/local/vgpu"),
        "the card has no memory or core limit; mount it elsewhere",
    ),
    (
        submitted_gpu_pod(
            resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]
        ),
        # Unread here: hami.engine.claims (tests/unit/engine/test_claims.py) for the classes.
        "spec.resourceClaims[0] (gpu) names ResourceClaimTemplate single-gpu, whose DeviceClass "
        "could not be read",
    ),
    (
        submitted_gpu_pod(resourceClaims=[{"name": "shared", "resourceClaimName": "shared-gpu"}]),
        "names ResourceClaim shared-gpu, whose DeviceClass could not be read",
    ),
]


@pytest.mark.parametrize(("pod", "says"), REFUSED)
def test_every_way_out_is_refused_naming_the_field_and_the_fix(
    pod: dict[str, Any], says: str
) -> None:
    for cfg in (CFG, STANDALONE):
        verdict = admit(copy.deepcopy(pod), cfg)
        assert not verdict.allowed and verdict.code == 403
        assert verdict.message.startswith("GPU pod refused")
        assert says in verdict.message, verdict.message


ADMITTED = [
    with_sidecar(**env("NVIDIA_VISIBLE_DEVICES", "none")),
    with_sidecar(**env("NVIDIA_VISIBLE_DEVICES", "void")),
    in_gpu_container(**env("NVIDIA_VISIBLE_DEVICES", "")),
    in_gpu_container(**env("NVIDIA_DRIVER_CAPABILITIES", "compute, utility,compat32")),
    in_gpu_container(securityContext={"capabilities": {"add": ["NET_ADMIN", "SYS_PTRACE"]}}),
    with_sidecar(envFrom=[{"configMapRef": {"name": "settings"}, "prefix": "APP_"}]),
    in_gpu_container(envFrom=[{"configMapRef": {"name": "settings"}, "prefix": "VLLM_"}]),
    host_path("/dev/shm"),
    host_path("/data/models"),
    host_path("/sys/class/net"),
    other_scheduler(submitted_gpu_pod()),
    # Issue 39: what reaches no other card.
    in_gpu_container(**env("NVIDIA_IMEX_CHANNELS", "void")),
    in_gpu_container(**env("NVIDIA_NVSWITCH", "disabled")),
    in_gpu_container(**env("NVIDIA_GDS", "enabled")),
    in_gpu_container(**env("NVIDIA_MOFED", "enabled")),
    in_gpu_container(**env("NVIDIA_GDRCOPY", "enabled")),
    in_gpu_container(**env("CUDA_TASK_PRIORITY", "0")),
    in_gpu_container(**env("CUDA_DISABLE_CONTROL", "false")),
    in_gpu_container(**env("GPU_CORE_UTILIZATION_POLICY", "force")),
    in_gpu_container(**env("GPU_CORE_UTILIZATION_POLICY", "Default")),
    in_gpu_container(**env("LD_PRELOAD", "/opt/tritonserver/lib/libtritonserver.so")),
    in_gpu_container(**env("CUDA_VISIBLE_DEVICES", "0")),
    with_sidecar(**env("CUDA_DEVICE_MEMORY_LIMIT_0", "1g")),  # no card, no HAMi-core
    in_gpu_container(securityContext={"capabilities": {"add": ["DAC_OVERRIDE"]}}),
    # A folder mounted above the runtime's device-list folder (AIBrix's vineyard socket) is no
    # device list; above /etc/ld.so.preload (/etc) it is mounted first and leaves it in place.
    mounting({"hostPath": {"path": "/var/run/vineyard-kubernetes/x"}}, "/var/run"),
    mounting({"configMap": {"name": "etc"}}, "/etc"),
    mounting({"emptyDir": {}}, "/usr/local/vgpu", container=1),
]


@pytest.mark.parametrize("pod", ADMITTED)
def test_what_stays_inside_the_slice_is_admitted(pod: dict[str, Any]) -> None:
    assert pod_escapes(pod) == []
    assert admit(pod, CFG).allowed


def test_a_pod_without_gpu_resources_is_not_ours_to_check() -> None:
    anything: dict[str, Any] = {
        "metadata": {"name": "dcgm"},
        "spec": {
            "nodeName": "gpu-07",
            "volumes": [{"name": "dev", "hostPath": {"path": "/dev"}}],
            "containers": [{"name": "c", **PRIVILEGED, **env("NVIDIA_VISIBLE_DEVICES", "all")}],
        },
    }
    assert not names_gpu(anything["spec"], ResourceNames())
    assert admit(anything, CFG).allowed


def test_a_foreign_gpu_pod_that_stays_in_its_slice_is_admitted_with_only_the_pins() -> None:
    pod = other_scheduler(with_sidecar(), "volcano")
    verdict = admit(pod, CFG)
    assert verdict.allowed and verdict.message == "pod already has different scheduler assigned"
    expected = copy.deepcopy(pod)
    no_switches = {"name": "NVIDIA_NVSWITCH", "value": "disabled"}
    expected["spec"]["containers"][0]["env"] = [
        {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
        {"name": "NVIDIA_IMEX_CHANNELS", "value": "void"},
        no_switches,
    ]
    expected["spec"]["containers"][1]["env"] = [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"},
        no_switches,
    ]
    assert verdict.pod == expected


def test_a_denial_lists_five_problems_and_counts_the_rest() -> None:
    pod = submitted_gpu_pod(nodeName="n")
    pod["spec"]["containers"] += [
        {"name": f"s{i}", **PRIVILEGED, **env("NVIDIA_VISIBLE_DEVICES", "all")} for i in range(3)
    ]
    message = admit(pod, CFG).message
    assert message.startswith("GPU pod refused for 7 reasons: (1) spec.nodeName is set (n)")
    assert "(5) container s1 sets NVIDIA_VISIBLE_DEVICES=all" in message
    assert "(6)" not in message and message.endswith(". And 2 more."), message


def test_a_second_pass_over_our_own_standalone_injection_is_admitted() -> None:
    """kube-apiserver may call the webhook again on its own output (reinvocationPolicy)."""
    once = admit(submitted_gpu_pod(), STANDALONE)
    assert once.allowed
    visible = next(e for e in once.pod["spec"]["containers"][0]["env"] if "VISIBLE" in e["name"])
    assert visible["valueFrom"]["configMapKeyRef"] == {
        "name": "p-hami-vgpu",
        "key": "cuda.NVIDIA_VISIBLE_DEVICES",
        "optional": False,
    }
    twice = admit(copy.deepcopy(once.pod), STANDALONE)
    assert twice.allowed and twice.pod == once.pod
    # The same reference written by a pod's author for another scheduler, or to a ConfigMap
    # of its own choosing, is not ours.
    assert not admit(other_scheduler(copy.deepcopy(once.pod)), STANDALONE).allowed
    forged = copy.deepcopy(once.pod)
    forged["metadata"]["annotations"]["hami.io/vgpu-config"] = "mine"
    assert "reads NVIDIA_VISIBLE_DEVICES from elsewhere" in admit(forged, STANDALONE).message


def debugged(pod: dict[str, Any], *containers: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    out["spec"]["nodeName"] = "gpu-07"  # ephemeral containers come to running pods
    out["spec"].setdefault("ephemeralContainers", []).extend(containers)
    return out


def test_ephemeral_containers_added_to_a_gpu_pod_are_held_to_the_same_checks() -> None:
    running = debugged(host_path("/data"))
    plain = {"name": "debug", "image": "busybox"}
    assert admit_ephemeral(debugged(running, plain), running, CFG).allowed
    for added, says in (
        ({**plain, **PRIVILEGED}, "container debug is privileged"),
        ({**plain, **SYS_ADMIN}, "adds SYS_ADMIN (spec.ephemeralContainers[0]"),
        ({**plain, **env("NVIDIA_VISIBLE_DEVICES", "all")}, "NVIDIA_VISIBLE_DEVICES=all"),
    ):
        verdict = admit_ephemeral(debugged(running, added), running, CFG)
        assert not verdict.allowed and says in verdict.message, verdict.message
    # One already there (added before this release) does not block the next.
    old = debugged(running, {**plain, **PRIVILEGED})
    assert admit_ephemeral(debugged(old, {"name": "second"}), old, CFG).allowed
    # A hostPath volume the pod kept from before these checks, mounted by a debug container.
    legacy = debugged(host_path("/dev"))
    mounting = {**plain, "volumeMounts": [{"name": "host", "mountPath": "/h"}]}
    verdict = admit_ephemeral(debugged(legacy, mounting), legacy, CFG)
    assert "mounts volume host (spec.ephemeralContainers[0].volumeMounts[0]), hostPath /dev" in (
        verdict.message
    )
    # Not a GPU pod: not ours.
    cpu = {"metadata": {"name": "c"}, "spec": {"containers": [{"name": "c"}]}}
    assert admit_ephemeral(debugged(cpu, {**plain, **PRIVILEGED}), cpu, CFG).allowed


def test_the_service_reviews_the_ephemeral_containers_subresource() -> None:
    running = debugged(submitted_gpu_pod())
    request = {
        "uid": "u",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "UPDATE",
        "subResource": "ephemeralcontainers",
        "object": debugged(running, {"name": "debug", **PRIVILEGED}),
        "oldObject": running,
    }
    outcome = AdmissionService(CFG).review(request)
    assert not outcome.allowed and "container debug is privileged" in outcome.message
    # Through status the spec stays as it was.
    assert AdmissionService(CFG).review({**request, "subResource": "status"}).allowed


PATHS = st.lists(
    st.sampled_from(
        ["", ".", "..", "dev", "sys", "nvidia0", "nvidiactl", "dri", "shm", "bus", "pci", "devices"]
    ),
    max_size=5,
).map(lambda parts: "/" + "//".join(parts))


@settings(max_examples=400, deadline=None)
@given(PATHS)
def test_a_host_path_that_resolves_to_the_device_nodes_is_refused_however_written(
    path: str,
) -> None:
    parts = [p for p in posixpath.normpath(path).split("/") if p]
    device = parts in ([], ["dev"]) or (
        parts[:1] == ["dev"] and len(parts) > 1 and parts[1].startswith(("nvidia", "dri"))
    )
    assert reaches_devices(path) is device, path
    # However mounted: read-only does not stop opening a device node.
    assert bool(mount_reach(path, False, HostFolders())) is device, path


@settings(max_examples=400, deadline=None)
@given(PATHS)
def test_the_pci_devices_are_refused_writable_and_admitted_read_only(path: str) -> None:
    parts = [p for p in posixpath.normpath(path).split("/") if p]
    pci = (
        parts in ([], ["sys"], ["sys", "bus"])
        or parts[:3] == ["sys", "bus", "pci"]
        or parts[:2] == ["sys", "devices"]
    )
    if not reaches_devices(path):
        assert bool(mount_reach(path, True, HostFolders())) is pci, path
        assert mount_reach(path, False, HostFolders()) == "", path


def updated(old: dict[str, Any], sub: str = "", **annotations: str) -> dict[str, Any]:
    """The AdmissionReview request of an update of `old` adding `annotations`."""
    new = copy.deepcopy(old)
    new["metadata"].setdefault("annotations", {}).update(annotations)
    return {
        "uid": "u",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "UPDATE",
        "subResource": sub,
        "object": new,
        "oldObject": old,
    }


@pytest.mark.parametrize("sub", ["", "status"])
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("cdi.k8s.io/x", "nvidia.com/gpu=all"),
        ("nvidia.cdi.k8s.io/container.cuda", "management.nvidia.com/gpu=all"),
        ("devices.gke.io/container.cuda", "- path: /dev/nvidia0\n"),
    ],
)
def test_an_update_that_adds_a_device_annotation_to_a_gpu_pod_is_refused(
    sub: str, key: str, value: str
) -> None:
    """Judged as at creation: a Pending GPU pod patched with the annotation is refused, through
    the pod and through its status, and so is a change of one the pod was created with (in a
    namespace exempt then)."""
    pending = admit(submitted_gpu_pod(schedulingGates=[{"name": "example.com/hold"}]), CFG).pod
    outcome = AdmissionService(CFG).review(updated(pending, sub, **{key: value}))
    assert not outcome.allowed and outcome.code == 403, outcome
    assert f"GPU pod refused: annotation {key} asks" in outcome.message
    carrying = updated(pending, sub, **{key: value})["object"]
    changed = AdmissionService(CFG).review(updated(carrying, sub, **{key: "nvidia.com/gpu=0,1"}))
    assert not changed.allowed and "(nvidia.com/gpu=0,1)" in changed.message
    # What adds no way out passes, as does any update of a pod that already had one.
    assert AdmissionService(CFG).review(updated(pending, sub, note="x")).allowed
    assert AdmissionService(CFG).review(updated(carrying, sub, note="x")).allowed
    ungated = copy.deepcopy(pending)
    ungated["spec"].pop("schedulingGates")
    assert AdmissionService(CFG).review({**updated(pending, sub), "object": ungated}).allowed


def test_updates_of_pods_without_a_gpu_and_spec_changes_through_status_are_not_judged() -> None:
    cpu = {"metadata": {"name": "c"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    assert (
        AdmissionService(CFG).review(updated(cpu, **{"cdi.k8s.io/x": "nvidia.com/gpu=all"})).allowed
    )
    # kube-apiserver puts a status update's spec back: only its metadata is judged.
    running = submitted_gpu_pod(nodeName="gpu-07")
    request = updated(running, "status")
    request["object"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert AdmissionService(CFG).review(request).allowed
    assert not AdmissionService(CFG).review({**request, "subResource": ""}).allowed


def test_a_core_policy_limiting_less_than_the_schedulers_is_refused_as_hami_core_reads_it() -> None:
    """HAMi-core reads force/FORCE and disable/DISABLE, anything else as the default."""
    forced = AdmissionConfig(
        gpu_core_policy="force",
        families=FAMILIES.replacing(NvidiaFamily(ResourceDefaults(), "force")),
    )
    for value in ("default", "Force", "disable"):
        verdict = admit(in_gpu_container(**env("GPU_CORE_UTILIZATION_POLICY", value)), forced)
        assert "limits its cores less than the scheduler's policy (force)" in verdict.message
    assert admit(in_gpu_container(**env("GPU_CORE_UTILIZATION_POLICY", "FORCE")), forced).allowed
    # The webhook's own entry, seen again on a second pass, is the policy itself.
    once = admit(submitted_gpu_pod(), forced).pod
    assert admit(once, forced).allowed
