"""The webhook's DRA mode through the admission service: checks and quota on the pod as written,
then the move (docs/dra.md); a second pass over its own output changes nothing."""

import json
from typing import Any

import pytest

from hami.engine.admission import AdmissionConfig
from hami.engine.dra.config import DraConfig
from hami.engine.dra.translate import GATE, REQUESTS
from hami.engine.jsonpatch import apply
from hami.service.admission import AdmissionService
from tests.builders import FAMILIES
from tests.unit.service.quotas import team_a_book
from tests.unit.service.reviews import pod, review


@pytest.fixture
def service() -> AdmissionService:
    return AdmissionService(
        AdmissionConfig(families=FAMILIES), team_a_book().quota, dra=DraConfig("all")
    )


def stored(service: AdmissionService, obj: dict[str, Any]) -> dict[str, Any]:
    outcome = service.review(review(obj))
    assert outcome.allowed, outcome.message
    result: dict[str, Any] = apply(obj, outcome.patch)
    return result


def test_a_gpu_pod_is_stored_gated_with_its_claim_entry(service: AdmissionService) -> None:
    out = stored(service, pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}))
    spec = out["spec"]
    assert spec["schedulerName"] == "hami-scheduler"
    assert spec["schedulingGates"] == [{"name": GATE}]
    assert spec["resourceClaims"] == [{"name": "hami-c", "resourceClaimName": "p-c"}]
    assert "nvidia.com/gpu" not in spec["containers"][0]["resources"].get("limits", {})
    assert json.loads(out["metadata"]["annotations"][REQUESTS]) == {
        "c": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}}
    }
    # Called again over its own output (reinvocation), the webhook changes nothing.
    assert service.review(review(out)).patch == []


@pytest.mark.parametrize(
    "obj",
    [
        pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3001}),
        # A record written by hand counts as the resources it names.
        pod({}, **{REQUESTS: '{"c": {"limits": {"nvidia.com/gpumem": 3001}}}'}),
    ],
)
def test_the_quota_is_checked_on_the_pod_as_written(
    service: AdmissionService, obj: dict[str, Any]
) -> None:
    outcome = service.review(review(obj))
    assert (outcome.allowed, outcome.message) == (False, "exceeding resource quota")


def test_an_annotation_dra_cannot_honour_is_refused_with_its_fix(
    service: AdmissionService,
) -> None:
    outcome = service.review(review(pod({"nvidia.com/gpu": 1}, **{"nvidia.com/use-gpuuuid": ","})))
    assert (outcome.allowed, outcome.code) == (False, 403)
    assert outcome.message.startswith("DRA mode: annotation nvidia.com/use-gpuuuid names nothing")


def test_dra_mode_off_leaves_the_device_plugin_path() -> None:
    out = stored(AdmissionService(AdmissionConfig(families=FAMILIES)), pod({"nvidia.com/gpu": 1}))
    assert "schedulingGates" not in out["spec"]
    assert out["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
