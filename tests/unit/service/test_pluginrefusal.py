"""A device plugin the chart's admission policy does not list: the scheduler says which identity
to add, from the kubelet's rejection of the pod."""

import logging
import re
from pathlib import Path
from typing import Any

import pytest

from hami.service.pluginrefusal import REASON, PluginRefusals, refused_writer
from tests.fakes.events import RecordedEvents

POLICY = Path(__file__).resolve().parents[3] / "helm/hami/templates/admission-policy.yaml"
USER = "system:serviceaccount:gpu-operator:nvidia-device-plugin"
# The kubelet's rejection when the plugin's Allocate failed on the policy's refusal (the plugin
# quotes the API server's answer to its bind-phase update).
REJECTED = (
    "Pod was rejected: Allocate failed due to rpc error: code = Unknown desc = "
    "pods \"p\" is forbidden: ValidatingAdmissionPolicy 'hami-scheduling-state' with binding "
    "'hami-scheduling-state' denied request: hami.io/bind-phase is scheduling state that only "
    f"the GPU scheduler and its device plugin write; {USER} may not set, change or remove it, "
    "which is unexpected"
)


def pod(uid: str, message: str = REJECTED, phase: str = "Failed") -> dict[str, Any]:
    """A pod as the kubelet leaves one our device plugin refused at admission: Failed with
    UnexpectedAdmissionError, no spec needed."""
    return {
        "metadata": {
            "namespace": "ns",
            "name": uid,
            "uid": uid,
            "annotations": {"hami.io/vgpu-node": "gpu-1", "hami.io/bind-phase": "allocating"},
        },
        "status": {"phase": phase, "reason": "UnexpectedAdmissionError", "message": message},
    }


def test_the_pattern_is_the_chart_policy_s_message() -> None:
    folded = " ".join(POLICY.read_text().split())
    assert (
        "only the GPU scheduler and its device plugin write; ' + request.userInfo.username + ' "
        "may not set, change or remove it'"
    ) in folded
    assert refused_writer(pod("a")) == USER


@pytest.mark.parametrize(
    "other",
    [
        pod("running", phase="Running"),
        pod("other-failure", "Allocate failed due to device number not matched"),
        {**pod("not-ours"), "metadata": {"namespace": "ns", "name": "x", "uid": "x"}},
    ],
)
def test_other_pods_say_nothing(other: dict[str, Any]) -> None:
    assert refused_writer(other) is None


async def test_refused_writes_are_logged_once_and_each_pod_gets_the_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events = RecordedEvents()
    leading = [False]
    refusals = PluginRefusals(events, lambda: leading[0])
    with caplog.at_level(logging.ERROR, "hami.service.pluginrefusal"):
        refusals.seen(pod("a"))  # a follower logs, posts nothing
        leading[0] = True
        for uid in ("a", "a", "b"):
            refusals.seen(pod(uid))
    assert len(caplog.records) == 1
    told = [(t, r) for t, r, _ in events.seen]
    assert told == [("Warning", REASON)] * 2
    message = events.seen[0][2]
    assert re.search(rf"add {USER} to the chart's admissionPolicy.devicePluginUsers", message)
    assert "node gpu-1" in message
