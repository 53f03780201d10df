"""A GPU pod's DRA claims, judged by the DeviceClasses they ask (issue 39): a claim or template
of a GPU class, shared or not, is refused naming the claim and the fix; one whose class cannot
be read is refused too; one of another class is admitted; a pod without GPU resources is not
ours. The webhook reads them at admission, within a bound (the route: tests/unit/webhook)."""

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from hami.engine.admission import AdmissionConfig, admit
from hami.engine.claims import CLAIM, TEMPLATE, ClaimSources, device_classes
from hami.kube.errors import Unavailable
from hami.service.claims import read_claims
from tests.builders import FAMILIES

CFG = AdmissionConfig(families=FAMILIES)
GPU = {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}


def template(name: str, *classes: str, first_available: bool = False) -> dict[str, Any]:
    """A resource.k8s.io/v1 ResourceClaimTemplate as the API server serves it."""
    requests: list[dict[str, Any]]
    if first_available:
        requests = [
            {"name": "r", "firstAvailable": [{"name": c, "deviceClassName": c} for c in classes]}
        ]
    else:
        requests = [{"name": c, "exactly": {"deviceClassName": c}} for c in classes]
    return {
        "kind": TEMPLATE,
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": requests}}},
    }


def shared_claim(name: str, device_class: str) -> dict[str, Any]:
    return {
        "kind": CLAIM,
        "metadata": {"name": name},
        "spec": {
            "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": device_class}}]}
        },
    }


def claiming(*claims: dict[str, str], gpu: bool = True, in_sidecar: bool = False) -> dict[str, Any]:
    cuda: dict[str, Any] = {"name": "cuda", "image": "x", "resources": dict(GPU) if gpu else {}}
    sidecar: dict[str, Any] = {"name": "side", "image": "x"}
    named = [{"name": c["name"]} for c in claims]
    (sidecar if in_sidecar else cuda).setdefault("resources", {})["claims"] = named
    return {
        "metadata": {"name": "p", "namespace": "team"},
        "spec": {"containers": [cuda, sidecar], "resourceClaims": list(claims)},
    }


def by_ref(*objects: dict[str, Any]) -> ClaimSources:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


@pytest.mark.parametrize("in_sidecar", [False, True])
def test_a_gpu_class_claim_on_a_gpu_pod_is_refused_naming_it_and_the_fix(in_sidecar: bool) -> None:
    pod = claiming({"name": "gpus", "resourceClaimTemplateName": "two"}, in_sidecar=in_sidecar)
    verdict = admit(pod, CFG, claims=by_ref(template("two", "gpu.nvidia.com")))
    assert not verdict.allowed and verdict.code == 403
    assert (
        "spec.resourceClaims[0] (gpus) names ResourceClaimTemplate two, which asks DeviceClass "
        "gpu.nvidia.com for GPUs" in verdict.message
    )
    assert "ask for cards with the GPU resources only" in verdict.message


@pytest.mark.parametrize(
    "source",
    [
        shared_claim("shared", "hami-core-gpu.project-hami.io"),
        shared_claim("shared", "mig.nvidia.com"),
        template("shared", "nic.example.com", "gpu.nvidia.com", first_available=True),
    ],
)
def test_a_shared_claim_or_an_alternative_of_a_gpu_class_is_refused(source: dict[str, Any]) -> None:
    ref = (
        {"name": "c", "resourceClaimName": "shared"}
        if source["kind"] == CLAIM
        else {"name": "c", "resourceClaimTemplateName": "shared"}
    )
    verdict = admit(claiming(ref), CFG, claims=by_ref(source))
    assert not verdict.allowed and f"names {source['kind']} shared, which asks" in verdict.message


def test_a_claim_whose_class_cannot_be_read_is_refused_saying_why() -> None:
    pod = claiming({"name": "gpus", "resourceClaimTemplateName": "later"})
    unread = admit(pod, CFG, claims={(TEMPLATE, "later"): "there is none in the namespace yet"})
    assert not unread.allowed
    assert (
        "ResourceClaimTemplate later, whose DeviceClass could not be read (there is none in the "
        "namespace yet)" in unread.message
    )
    assert "create the ResourceClaimTemplate first and retry" in unread.message
    assert "could not be read (it was not read)" in admit(pod, CFG).message


def test_other_classes_are_admitted_and_the_gpu_classes_are_configurable() -> None:
    pod = claiming({"name": "nic", "resourceClaimTemplateName": "rdma"})
    nic = by_ref(template("rdma", "rdma.example.com"))
    assert admit(pod, CFG, claims=nic).allowed
    own = AdmissionConfig(gpu_device_classes=("rdma.example.com",), families=FAMILIES)
    assert "asks DeviceClass rdma.example.com for GPUs" in admit(pod, own, claims=nic).message
    # A pod without GPU resources is not ours: its claims are the DRA driver's to count.
    cpu = claiming({"name": "gpus", "resourceClaimTemplateName": "two"}, gpu=False)
    assert admit(cpu, CFG).allowed


def test_the_classes_are_read_from_v1_and_from_v1beta1_manifests() -> None:
    assert device_classes(TEMPLATE, template("t", "a", "b")) == ["a", "b"]
    beta = {"spec": {"devices": {"requests": [{"name": "r", "deviceClassName": "gpu.nvidia.com"}]}}}
    assert device_classes(CLAIM, beta) == ["gpu.nvidia.com"]
    assert device_classes(CLAIM, {}) == []


async def test_each_claim_is_read_once_within_a_bound_and_a_failure_says_why() -> None:
    asked: list[tuple[str, str, str]] = []

    async def reader(namespace: str, kind: str, name: str) -> Mapping[str, Any] | None:
        asked.append((namespace, kind, name))
        if name == "slow":
            await asyncio.sleep(5)
        if name == "down":
            raise Unavailable("get resourceclaim team/down: 503")
        return template(name, "gpu.nvidia.com") if name == "two" else None

    refs = [(TEMPLATE, "two"), (TEMPLATE, "two"), (CLAIM, "slow"), (CLAIM, "down"), (CLAIM, "none")]
    found = await read_claims(reader, "team", refs, within=0.05)
    assert sorted(asked) == sorted({("team", k, n) for k, n in refs})
    assert found[(TEMPLATE, "two")]["metadata"]["name"] == "two"  # type: ignore[index]
    assert found[(CLAIM, "slow")] == "no answer from the API server within 0.05 s"
    assert "the API server answered: get resourceclaim team/down: 503" in str(
        found[(CLAIM, "down")]
    )
    assert found[(CLAIM, "none")] == "there is none in the namespace yet"
