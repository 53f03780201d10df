"""`hami explain` over a cache: pending reasons, bound pods, non-GPU pods."""

from typing import Any

import pytest

from hami.cache.store import ClusterCache
from hami.engine.codec import encode_node_devices
from hami.engine.model import ContainerDevice, DeviceInfo
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.service.annotations import allocation_annotations
from hami.service.explain import explain
from tests.builders import FAMILIES


def nodes(**gpu_node: Any) -> list[dict[str, Any]]:
    devs = (DeviceInfo("GPU-a", 0, 10, 15360, 100, "NVIDIA-Tesla T4"),)
    return [
        {
            "metadata": {
                "name": "gpu-1",
                "labels": {"pool": "gpu", "rank": "3"},
                "annotations": {"hami.io/node-nvidia-register": encode_node_devices(devs)},
            },
            "spec": gpu_node,
            "status": {"allocatable": {"nvidia.com/gpu": "10"}},
        },
        {"metadata": {"name": "cpu-1", "labels": {"pool": "cpu"}}},
    ]


def cluster() -> ClusterCache:
    cache = ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes(nodes())
    cache.replace_pods(
        [
            {
                "metadata": {
                    "uid": "t",
                    "namespace": "ns",
                    "name": "tenant",
                    "annotations": allocation_annotations(
                        "gpu-1", ((ContainerDevice("GPU-a", 1000, 0),),), 0, families=FAMILIES
                    ),
                },
                "spec": {
                    "nodeName": "gpu-1",
                    "containers": [
                        {
                            "name": "c",
                            "resources": {
                                "limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}
                            },
                        }
                    ],
                },
                "status": {"phase": "Running"},
            },
        ]
    )
    return cache


def pod(policy: str = "mutex", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "uid": "p",
            "namespace": "ns",
            "name": "p",
            "annotations": {"hami.io/gpu-scheduler-policy": policy},
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}},
                }
            ],
            **spec,
        },
    }


def test_pending_pod_gets_kube_schedulers_sentence_and_each_nodes_reason() -> None:
    lines = explain(cluster(), pod(), Defaults(), ResourceDefaults(), verbose=True)
    assert lines[0] == "ns/p is pending (GPU policy 'mutex', node policy 'binpack')"
    assert (
        "0/2 nodes are available: 1 1/1 ExclusiveDeviceAllocateConflict, 1 node unregistered."
        in lines[1]
    )
    assert "  gpu-1: 1/1 ExclusiveDeviceAllocateConflict" in lines
    assert any(
        line.startswith("  cpu-1: node unregistered (no hami.io/node-nvidia-register")
        for line in lines
    )
    assert "  gpu-1: device GPU-a computer score is 1.651042" in lines


def test_a_pod_that_would_fit_says_where() -> None:
    assert "  it fits now: node gpu-1, cards GPU-a,NVIDIA,1000,0:;" in explain(
        cluster(), pod("binpack"), Defaults(), ResourceDefaults()
    )


def test_bound_and_non_gpu_pods() -> None:
    bound = pod(nodeName="gpu-1")
    assert explain(cluster(), bound, Defaults(), ResourceDefaults())[0] == "ns/p is bound to gpu-1"
    plain = {
        "metadata": {"namespace": "ns", "name": "web"},
        "spec": {"containers": [{"name": "c"}]},
    }
    assert "asks for no GPU" in explain(cluster(), plain, Defaults(), ResourceDefaults())[0]


def test_unknown_policy_is_explained() -> None:
    assert "valid names" in explain(cluster(), pod("fastest"), Defaults(), ResourceDefaults())[0]


def test_a_pod_over_its_namespace_quota_is_told_so_per_node() -> None:
    cache = cluster()
    cache.quotas.replace(
        [
            {
                "metadata": {"uid": "q", "namespace": "ns", "name": "gpu"},
                "spec": {"hard": {"limits.nvidia.com/gpumem": "1500"}},
            }
        ]
    )
    lines = explain(cache, pod("binpack"), Defaults(), ResourceDefaults())
    assert "  namespace ns GPU quota (used of limit): nvidia.com/gpumem 1000 of 1500" in lines
    assert "  gpu-1: 1/1 ResourceQuotaNotFit" in lines
    assert not any("it fits now" in line for line in lines)


TAINT = {"key": "gpu", "value": "yes", "effect": "NoSchedule"}
AFFINITY = "node(s) didn't match Pod's node affinity/selector"


def required(*expressions: dict[str, Any], fields: Any = ()) -> dict[str, Any]:
    term: dict[str, Any] = {"matchExpressions": list(expressions)}
    if fields:
        term["matchFields"] = list(fields)
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


# kube-scheduler rules these nodes out before the extender is asked, so explain does too, with
# its wording, and never says "fits now" on such a node.
@pytest.mark.parametrize(
    ("spec", "gpu_node", "gpu_reason", "sentence"),
    [
        ({"nodeSelector": {"pool": "gpu"}}, {}, None, None),
        ({"nodeSelector": {"pool": "tpu"}}, {}, AFFINITY, f"2 {AFFINITY}"),
        (
            {"affinity": required({"key": "kubernetes.io/hostname", "operator": "Exists"})},
            {},
            AFFINITY,
            f"2 {AFFINITY}",
        ),
        (
            {
                "affinity": required(
                    fields=[{"key": "metadata.name", "operator": "NotIn", "values": ["gpu-1"]}]
                )
            },
            {},
            AFFINITY,
            None,
        ),
        (
            {"affinity": required({"key": "rank", "operator": "Gt", "values": ["2"]})},
            {},
            None,
            None,
        ),
        (
            {"affinity": required({"key": "pool", "operator": "DoesNotExist"})},
            {},
            AFFINITY,
            f"2 {AFFINITY}",
        ),
        (
            {"affinity": required({"key": "pool", "operator": "NotIn", "values": ["cpu"]})},
            {},
            None,
            None,
        ),
        ({"affinity": required()}, {}, AFFINITY, f"2 {AFFINITY}"),  # an empty term matches none
        (
            {"affinity": required({"key": "rank", "operator": "Lt", "values": ["2"]})},
            {},
            AFFINITY,
            f"2 {AFFINITY}",
        ),
        ({}, {"taints": [TAINT]}, "node(s) had untolerated taint {gpu: yes}", None),
        ({"tolerations": [{"key": "gpu", "operator": "Exists"}]}, {"taints": [TAINT]}, None, None),
        ({"tolerations": [{"operator": "Exists"}]}, {"taints": [TAINT]}, None, None),
        (
            {"tolerations": [{"key": "gpu", "value": "no"}]},
            {"taints": [TAINT]},
            "node(s) had untolerated taint {gpu: yes}",
            None,
        ),
        (
            {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}]},
            {"taints": [TAINT]},
            "node(s) had untolerated taint {gpu: yes}",
            None,
        ),
        ({}, {"taints": [{**TAINT, "effect": "PreferNoSchedule"}]}, None, None),
        ({}, {"unschedulable": True}, "node(s) were unschedulable", None),
    ],
)
def test_kube_schedulers_node_checks_come_first(
    spec: dict[str, Any], gpu_node: dict[str, Any], gpu_reason: str | None, sentence: str | None
) -> None:
    lines = explain(
        cluster(), pod("binpack", **spec), Defaults(), ResourceDefaults(), nodes=nodes(**gpu_node)
    )
    if gpu_reason is None:
        assert "  it fits now: node gpu-1, cards GPU-a,NVIDIA,1000,0:;" in lines, lines
        return
    assert not any("fits now" in line for line in lines), lines
    assert f"  gpu-1: {gpu_reason}" in lines
    expected = sentence or f"1 node unregistered, 1 {gpu_reason}"
    assert lines[1] == f"  0/2 nodes are available: {expected}.", lines
