"""The webhook's quota check, as HAMi's: a pod whose explicit request alone is over what its
namespace has left is refused at creation with HAMi's words."""

from typing import Any

import pytest

from hami.engine.admission import AdmissionConfig
from hami.service.admission import AdmissionService
from tests.builders import FAMILIES
from tests.unit.service.quotas import team_a_book


def review(limits: dict[str, Any], namespace: str = "team-a", **meta: Any) -> dict[str, Any]:
    return {
        "uid": "u",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "namespace": namespace,
        "operation": "CREATE",
        "object": {
            "metadata": {"name": "p", "namespace": namespace, **meta},
            "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
        },
    }


@pytest.fixture
def service() -> AdmissionService:
    return AdmissionService(AdmissionConfig(families=FAMILIES), team_a_book().quota)


@pytest.mark.parametrize(
    ("limits", "namespace", "allowed"),
    [
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}, "team-a", True),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3001}, "team-a", False),
        ({"nvidia.com/gpu": 2, "nvidia.com/gpumem": 2000}, "team-a", False),
        # Known only once a card is chosen: filter checks it there.
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 90}, "team-a", True),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000}, "team-b", True),
        ({"cpu": 1}, "team-a", True),
    ],
)
def test_over_quota_requests_are_refused_at_creation(
    service: AdmissionService, limits: dict[str, Any], namespace: str, allowed: bool
) -> None:
    outcome = service.review(review(limits, namespace))
    assert outcome.allowed is allowed
    if not allowed:
        assert (outcome.message, outcome.code) == ("exceeding resource quota", 403)


def test_pods_of_another_scheduler_are_not_counted(service: AdmissionService) -> None:
    request = review({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000})
    request["object"]["spec"]["schedulerName"] = "my-scheduler"
    assert service.review(request).allowed
