"""The webhook and the device families: a claimed container makes the pod ours, with the
family's pod fields and none of NVIDIA's node-side injection."""

from typing import Any

import pytest

from hami.engine.admission import AdmissionConfig, admit
from hami.engine.families.base import Claim
from hami.engine.families.hygon import HYGON
from hami.engine.families.registry import Families
from hami.engine.familyadmit import claim_families
from hami.engine.injection import InjectionConfig, driver_profile
from hami.engine.requests import ResourceDefaults
from tests.builders import FAMILIES, family_limits

STANDALONE = AdmissionConfig(
    injection=InjectionConfig(
        mode="standalone",
        driver=driver_profile("gke"),
        hook_path="/home/kubernetes/bin/nvidia/vgpu",
    ),
    families=FAMILIES,
)


def pod(*limits: dict[str, str], **spec: Any) -> dict[str, Any]:
    containers = [
        {"name": f"c{i}", "image": "busybox", "resources": {"limits": dict(lim)}}
        for i, lim in enumerate(limits)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": containers, **spec},
    }


@pytest.mark.parametrize("family", FAMILIES.others, ids=lambda f: f.wire.type)
def test_a_family_pod_gets_our_scheduler_and_no_nvidia_injection(family: Any) -> None:
    a = admit(pod(family_limits(family, 1)), STANDALONE)
    assert a.allowed, a.message
    assert a.pod["spec"]["schedulerName"] == "hami-scheduler"
    c = a.pod["spec"]["containers"][0]
    # None of NVIDIA's node-side injection (a family may set its own variables).
    assert "volumeMounts" not in c and "volumes" not in a.pod["spec"]
    assert not any(
        e["name"].startswith(("CUDA_", "LD_")) or e["name"] == "NVIDIA_VISIBLE_DEVICES"
        for e in c.get("env") or ()
    )


def test_a_pod_asking_nvidia_and_a_family_is_injected_for_its_nvidia_container_only() -> None:
    a = admit(
        pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}, family_limits(HYGON, 1)),
        STANDALONE,
    )
    assert a.allowed, a.message
    nvidia, dcu = a.pod["spec"]["containers"]
    assert any(m["mountPath"] == "/etc/ld.so.preload" for m in nvidia["volumeMounts"])
    assert not any(m["mountPath"] == "/etc/ld.so.preload" for m in dcu.get("volumeMounts") or ())


def test_a_family_pod_of_another_scheduler_is_left_alone() -> None:
    a = admit(
        pod(family_limits(HYGON, 1), schedulerName="volcano"), AdmissionConfig(families=FAMILIES)
    )
    assert a.allowed and a.pod["spec"]["schedulerName"] == "volcano"


def test_a_family_ask_hami_cannot_read_is_refused_naming_it() -> None:
    a = admit(
        pod({"hygon.com/dcunum": "1", "hygon.com/dcumem": "lots"}),
        AdmissionConfig(families=FAMILIES),
    )
    assert not a.allowed and "hygon.com/dcumem" in a.message


def test_forged_family_allocation_is_refused() -> None:
    p = pod(family_limits(HYGON, 1))
    p["metadata"]["annotations"] = {HYGON.wire.allocated_annotation: "DCU-0,DCU,0,100:;"}
    a = admit(p, AdmissionConfig(families=FAMILIES))
    assert not a.allowed and HYGON.wire.allocated_annotation in a.message


class _Fields:
    """A family that sets a pod field when it claims (as Ascend's runtimeClassName)."""

    wire = HYGON.wire

    def claim(self, container: Any, pod: Any) -> Claim:
        return Claim(True, (("runtimeClassName", "vendor"),))

    def container_request(self, container: Any, *, strict: bool = False) -> None:
        return None


def test_family_pod_fields_are_set_only_when_absent() -> None:
    families = Families((_Fields(),))  # type: ignore[arg-type]
    bare = pod({})
    assert claim_families(bare, bare["spec"]["containers"], ResourceDefaults(), families)
    assert bare["spec"]["runtimeClassName"] == "vendor"
    own = pod({}, runtimeClassName="mine")
    claim_families(own, own["spec"]["containers"], ResourceDefaults(), families)
    assert own["spec"]["runtimeClassName"] == "mine"


class _Sets:
    """A family whose claim rewrites the container (as Kunlun's, Moore Threads', Iluvatar's)."""

    wire = HYGON.wire

    def claim(self, container: Any, pod: Any) -> Claim:
        return Claim(
            True,
            limits=(("hygon.com/dcumem", "4096"),),
            requests=(("hygon.com/dcumem", "4096"),),
            env=(("VENDOR_VISIBLE", "x"), ("KEPT", "new")),
            annotations=(("vendor/asked", "1"),),
        )

    def container_request(self, container: Any, *, strict: bool = False) -> None:
        return None


def test_a_claims_limits_requests_env_and_annotations_are_applied() -> None:
    families = Families((_Sets(),))  # type: ignore[arg-type]
    p = pod({"hygon.com/dcunum": "1", "hygon.com/dcumem": "3000"})
    (container,) = p["spec"]["containers"]
    container["env"] = [{"name": "KEPT", "value": "mine"}]
    assert claim_families(p, [container], ResourceDefaults(), families)
    assert container["resources"]["limits"]["hygon.com/dcumem"] == "4096"
    assert container["resources"]["requests"] == {"hygon.com/dcumem": "4096"}
    assert container["env"] == [
        {"name": "KEPT", "value": "mine"},
        {"name": "VENDOR_VISIBLE", "value": "x"},
    ]
    assert p["metadata"]["annotations"] == {"vendor/asked": "1"}


def test_a_family_changes_the_containers_it_does_not_claim_in_an_nvidia_pod() -> None:
    """HAMi's webhook runs every family's MutateAdmission over every container of a pod it
    takes and keeps what each changed: with Ascend's `overwriteEnv`, every container of an
    NVIDIA-only pod gets an empty ASCEND_VISIBLE_DEVICES (its own value is kept), and the
    pod is NVIDIA's as before."""
    from hami.engine.families.ascend import DEFAULT_VNPUS
    from hami.engine.families.registry import from_device_config

    chips = [{**c, "overwriteEnv": True} for c in DEFAULT_VNPUS["configs"]]
    cfg = AdmissionConfig(families=from_device_config({"vnpus": {"configs": chips}}))
    p = pod({"nvidia.com/gpu": "1"}, {"cpu": "1"})
    p["spec"]["containers"][1]["env"] = [{"name": "ASCEND_VISIBLE_DEVICES", "value": "none"}]
    a = admit(p, cfg)
    assert a.allowed, a.message
    assert a.pod["spec"]["schedulerName"] == "hami-scheduler"
    gpu, cpu = a.pod["spec"]["containers"]
    assert {"name": "ASCEND_VISIBLE_DEVICES", "value": ""} in gpu["env"]
    assert [e for e in cpu["env"] if e["name"] == "ASCEND_VISIBLE_DEVICES"] == [
        {"name": "ASCEND_VISIBLE_DEVICES", "value": "none"}
    ]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"} in cpu["env"]
    # Without overwriteEnv (the chart's default) nothing of Ascend's is set.
    plain = admit(pod({"nvidia.com/gpu": "1"}, {"cpu": "1"}), AdmissionConfig(families=FAMILIES))
    assert not any(
        e["name"] == "ASCEND_VISIBLE_DEVICES"
        for c in plain.pod["spec"]["containers"]
        for e in c.get("env") or ()
    )
