"""A DeviceClass that maps `nvidia.com/gpu` (`extendedResourceName`, KEP-5004) meeting a
device-plugin pod (hami.engine.dra.extended): kube-scheduler 1.36 would refuse the pod on every
node for the HAMi resources no node advertises, so the webhook refuses it naming the class;
DRA mode moves those resources into claims and admits it (tests/e2e/test_dra_extended.py has it
on the real control plane)."""

from typing import Any

import pytest

from hami.engine.admission import AdmissionConfig
from hami.engine.dra.config import DRA_OFF, DraConfig
from hami.service.admission import AdmissionService
from tests.builders import FAMILIES
from tests.unit.service.reviews import pod, review

MAPPED = {"gpu.nvidia.com": "nvidia.com/gpu", "nic": ""}


def service(classes: dict[str, str], dra: DraConfig = DRA_OFF) -> AdmissionService:
    return AdmissionService(AdmissionConfig(families=FAMILIES), dra=dra, extended=lambda: classes)


@pytest.mark.parametrize(
    ("limits", "unfit"),
    [
        ({"nvidia.com/gpu": 1}, "nvidia.com/gpucores"),  # a whole card: HAMi writes 100 cores
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}, "nvidia.com/gpumem"),
        (
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 50, "nvidia.com/gpucores": 30},
            "nvidia.com/gpucores, nvidia.com/gpumem-percentage",
        ),
    ],
)
def test_a_pod_asking_a_mapped_resource_is_refused_naming_the_class(
    limits: dict[str, Any], unfit: str
) -> None:
    outcome = service(MAPPED).review(review(pod(limits)))
    assert not outcome.allowed and outcome.code == 403
    assert outcome.message.startswith(
        "DeviceClass gpu.nvidia.com serves nvidia.com/gpu through DRA"
    )
    assert f"'cannot fit resource' for {unfit}, which no node advertises" in outcome.message
    assert "dra.enabled=true" in outcome.message


def test_without_a_mapping_of_what_the_pod_asks_it_is_admitted_as_before() -> None:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}
    assert service({"nic": "", "other": "example.com/fpga"}).review(review(pod(limits))).allowed
    assert service({}).review(review(pod(limits))).allowed


def test_dra_mode_moves_the_resources_out_and_admits_the_pod() -> None:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}
    assert service(MAPPED, DraConfig("all")).review(review(pod(limits))).allowed
    # Under mode annotated a pod left on the device plugin's path is refused still.
    refused = service(MAPPED, DraConfig("annotated")).review(review(pod(limits)))
    assert not refused.allowed and "hami.io/device-world: dra" in refused.message


def test_a_pod_another_scheduler_places_is_not_judged() -> None:
    obj = pod({"nvidia.com/gpu": 1})
    obj["spec"]["schedulerName"] = "volcano"
    assert service(MAPPED).review(review(obj)).allowed
