"""The chart as the labs install it, checked by the real API server (server-side dry run).

Lab 14's Step 3 line (HAMi's chart values, verbatim) and Lab 12 in standalone mode with the
libvgpu installer: every object the chart renders for them must be accepted as the API server
would create it, in the namespace the lab uses.
"""

from __future__ import annotations

import pytest
import yaml

from tests.builders.chart import LAB12, helm, lab14_step3_manifest, template_args

from .kube import Kube

pytestmark = pytest.mark.e2e


def manifest(case: str, namespace: str) -> str:
    if case == "lab14-step3":
        return lab14_step3_manifest()  # installs into kube-system, as the lab does
    return helm(*template_args(*LAB12, namespace=namespace)).stdout


@pytest.mark.parametrize("case", ["lab14-step3", "lab12-standalone"])
def test_helm_lab_installs_are_accepted_by_the_api_server(
    kube: Kube, namespace: str, case: str
) -> None:
    text = manifest(case, namespace)
    docs = [d for d in yaml.safe_load_all(text) if d]
    result = kube("apply", "--dry-run=server", "-o", "name", "-f", "-", stdin=text)
    accepted = result.stdout.split()
    assert len(accepted) == len(docs), (accepted, [d["kind"] for d in docs])
    daemonsets = {d["metadata"]["name"] for d in docs if d["kind"] == "DaemonSet"}
    if case == "lab14-step3":
        assert daemonsets == {"hami-device-plugin"}
    else:
        assert daemonsets == {"hami-py-libvgpu-installer"}
