"""Per-namespace GPU quotas on the real control plane: two namespaces, one limited.

One node with a 24 GiB and a 16 GiB card. The limited namespace's ResourceQuota allows
20000 MiB (`limits.nvidia.com/gpumem`); its pods ask for 50% of a card, which is 12288 MiB on
the big card and 8192 MiB on the small one, so each is placed where it still fits the quota,
the next one stays Pending with HAMi's reason while the other namespace's pods keep landing,
and deleting a pod or raising the quota lets the pending pod land without waiting for
kube-scheduler's five-minute flush. A pod whose explicit MiB alone are over what is left is
refused at creation, as HAMi's webhook refuses it.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator

import pytest

from .cluster import ControlPlane, NodeSim
from .kube import Kube, KubectlError, wait_for
from .nodespec import CardSpec, NodeSpec

pytestmark = pytest.mark.e2e

NODE = "quota-node"
BIG, SMALL = "GPU-quota-big", "GPU-quota-small"


def quota(limit: int) -> str:
    return f"""\
apiVersion: v1
kind: ResourceQuota
metadata: {{name: gpu}}
spec:
  hard: {{limits.nvidia.com/gpumem: "{limit}"}}
"""


def pod(name: str, limits: str, annotations: str = "{}") -> str:
    """kubectl's manifest of a pod whose limits and annotations are YAML as the quota tests write
    them (flow style, quantities as typed)."""
    return f"""\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  annotations: {annotations}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: cuda
    image: busybox
    resources: {{limits: {limits}}}
"""


HALF = "{nvidia.com/gpu: 1, nvidia.com/gpumem-percentage: 50}"
ON_BIG = f"{{nvidia.com/use-gpuuuid: {BIG}}}"


@pytest.fixture
def other_namespace(kube: Kube, namespace: str) -> Iterator[str]:
    name = f"{namespace[:50]}-other"
    kube("create", "namespace", name)
    yield name
    kube("delete", "pods", "--all", "-n", name, "--force", "--grace-period=0", "--wait=true")


def test_a_namespace_stops_at_its_quota_and_resumes_when_freed(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    other_namespace: str,
    nodesim: Callable[..., NodeSim],
) -> None:
    nodesim(NodeSpec(NODE, (CardSpec(BIG, 0, 24576), CardSpec(SMALL, 1, 16384))))
    limited, other = namespace, other_namespace
    kube.apply(quota(20000), limited)
    kube.apply(quota(1_000_000), other)

    def cards(ns: str, name: str) -> str:
        return kube.pod_annotation(ns, name, "hami.io/vgpu-devices-allocated") or ""

    def refused(name: str) -> str:
        def message() -> str:
            text = kube.pod_scheduled_message(limited, name) or ""
            return text if "ResourceQuotaNotFit" in text else ""

        return wait_for(message, timeout=60, what=f"{name} to be refused for the quota")

    # 8000 MiB on the big card, then 50%: 12288 MiB on the big card would pass the quota
    # (8000 + 12288 > 20000), 8192 MiB on the small card does not.
    kube.apply(pod("a-1", "{nvidia.com/gpu: 1, nvidia.com/gpumem: 8000}", ON_BIG), limited)
    kube.wait_ready(limited, ["a-1"])
    kube.apply(pod("a-2", HALF), limited)
    kube.wait_ready(limited, ["a-2"])
    assert cards(limited, "a-2").startswith(f"{SMALL},NVIDIA,8192,0:"), cards(limited, "a-2")

    # 16192 MiB held: 50% fits no card within the quota, though both have room.
    kube.apply(pod("a-3", HALF), limited)
    message = refused("a-3")
    assert "0/1 nodes are available: 1 2/2 ResourceQuotaNotFit." in message, message
    events = [e.get("message", "") for e in kube.pod_events(limited, "a-3")]
    assert any("2/2 ResourceQuotaNotFit" in m for m in events), events

    # An explicit request over what is left is refused at creation, as HAMi's webhook does.
    with pytest.raises(KubectlError, match="denied the request: exceeding resource quota"):
        kube.apply(pod("a-big", "{nvidia.com/gpu: 1, nvidia.com/gpumem: 4000}"), limited)

    # The other namespace keeps landing, on the same node (on the big card, so that the small
    # one keeps room for a-3 below).
    for name in ("b-1", "b-2"):
        kube.apply(pod(name, "{nvidia.com/gpu: 1, nvidia.com/gpumem: 4000}", ON_BIG), other)
    kube.wait_ready(other, ["b-1", "b-2"])

    kubeconfig = str(control_plane.kubeconfig)
    explained = subprocess.run(
        [sys.executable, "-m", "hami", "explain", f"{limited}/a-3", "--kubeconfig", kubeconfig],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert f"namespace {limited} GPU quota (used of limit): nvidia.com/gpumem 16192 of 20000" in (
        explained
    ), explained
    assert f"  {NODE}: 2/2 ResourceQuotaNotFit" in explained, explained

    with urllib.request.urlopen(control_plane.metrics_url, timeout=10) as response:
        body = response.read().decode()
    assert (
        f'hami_resource_quota_limit{{namespace="{limited}",quota_name="nvidia.com/gpumem",'
        f'zone="vGPU"}} 20000.0'
    ) in body
    assert (
        f'hami_resource_quota_used{{limit="20000",namespace="{limited}",'
        f'quota_name="nvidia.com/gpumem",zone="vGPU"}} 16192.0'
    ) in body

    # Deleting a-1 frees 8000 MiB of the quota: a-3 lands on the small card (8192 MiB there).
    kube("delete", "pod", "a-1", "-n", limited, "--force", "--grace-period=0", "--wait=false")
    kube.wait_ready(limited, ["a-3"], timeout=30)
    assert cards(limited, "a-3").startswith(f"{SMALL},NVIDIA,8192,0:"), cards(limited, "a-3")

    # 16384 MiB held, the small card full: 50% of the big card waits for a larger quota.
    kube.apply(pod("a-4", HALF), limited)
    refused("a-4")
    kube.apply(quota(30000), limited)
    kube.wait_ready(limited, ["a-4"], timeout=30)
    assert cards(limited, "a-4").startswith(f"{BIG},NVIDIA,12288,0:"), cards(limited, "a-4")
