"""`hami serve --device-config-file` on the real control plane: a device config renaming one
family's resources (Hygon's `hygon.com/dcunum` to `example.com/dcu`, as HAMi's chart's
device-config override would) is used by every part of the process. A pod asking the renamed
resource is claimed by our webhook, placed by kube-scheduler through our extender on a node
whose Hygon plugin advertises that name, bound with Hygon's allocation annotation, counted on
its card by our metrics and released; a pod asking the default name is no longer ours.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami.engine.families.registry import from_device_config
from tests.builders import FAMILIES

from .cluster import RENAMED_DCU, SCHEDULER_NAME, ControlPlane, NodeSim
from .kube import Kube
from .nodespec import family_node
from .test_families import counted_then_released, manifest
from .test_helm import GPU_POD, dry_run, variant

pytestmark = pytest.mark.e2e

CONFIG = {
    "hygon": {
        "resourceCountName": RENAMED_DCU[0],
        "resourceMemoryName": RENAMED_DCU[1],
        "resourceCoreName": RENAMED_DCU[2],
        "memoryFactor": 1,
    }
}


def test_a_renamed_familys_pod_is_claimed_placed_bound_and_released(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    app_args: Callable[..., None],
    tmp_path: Path,
) -> None:
    config = tmp_path / "device-config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    app_args("--device-config-file", str(config))
    families = from_device_config(CONFIG)
    dcu = families.by_type()["DCU"]
    assert dcu.wire.resources.count == "example.com/dcu"
    node = replace(family_node("cfg-dcu", dcu, cards=1, split=1), resource=RENAMED_DCU[0])
    nodesim(node)

    kube.apply(manifest("renamed", dcu), namespace)
    kube.wait_ready(namespace, ["renamed"], timeout=60)
    pod = kube.pod(namespace, "renamed")
    assert pod["spec"]["schedulerName"] == SCHEDULER_NAME
    assert pod["spec"]["containers"][0]["resources"]["limits"][RENAMED_DCU[0]] == "1"
    annotations = pod["metadata"]["annotations"]
    assert pod["spec"]["nodeName"] == node.name
    assert annotations.get(dcu.wire.allocated_annotation), annotations
    counted_then_released(control_plane, kube, namespace, pod, families)

    # The chart's default name is no DCU of this process: the webhook leaves its pod alone.
    default = json.loads(manifest("default-name", from_device_config({}).by_type()["DCU"]))
    assert "hygon.com/dcunum" in default["spec"]["containers"][0]["resources"]["limits"]
    assert _created(kube, namespace, default)["spec"].get("schedulerName") == "default-scheduler"


def _created(kube: Kube, namespace: str, pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod as kube-apiserver would store it, our webhook's changes included."""
    out = dry_run(kube, dict(pod), namespace)
    assert out.returncode == 0, out.stderr
    created: dict[str, Any] = json.loads(out.stdout)
    return created


def test_every_familys_container_changes_reach_an_nvidia_only_pod(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    app_args: Callable[..., None],
    tmp_path: Path,
) -> None:
    """As HAMi's webhook runs every family's MutateAdmission over every container: with
    Ascend's overwriteEnv, an NVIDIA-only pod's containers get an empty
    ASCEND_VISIBLE_DEVICES beside NVIDIA's own changes."""
    from hami.engine.families.ascend import DEFAULT_VNPUS

    chips = [{**c, "overwriteEnv": True} for c in DEFAULT_VNPUS["configs"]]
    config = tmp_path / "device-config.yaml"
    config.write_text(yaml.safe_dump({"vnpus": {"configs": chips}}))
    app_args("--device-config-file", str(config))
    gpu = GPU_POD["spec"]["containers"][0]  # type: ignore[index]
    side = {"name": "side", "image": "busybox"}
    pod = variant(GPU_POD, metadata__name="nvidia-only", spec__containers=[gpu, side])
    created = _created(kube, namespace, pod)
    spec = created["spec"]
    assert spec["schedulerName"] == SCHEDULER_NAME
    for c in spec["containers"]:
        # kube-apiserver stores an empty value as none.
        visible = [e for e in c["env"] if e["name"] == "ASCEND_VISIBLE_DEVICES"]
        assert [e.get("value", "") for e in visible] == [""], c


def test_the_charts_ascend_runtime_class_reaches_an_ascend_pod(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    app_args: Callable[..., None],
) -> None:
    """HAMi's chart's devices.ascend.runtimeClassName (hami serve's
    --ascend-runtime-class-name) is set on a pod given Ascend NPUs that names none."""
    name = f"ascend-{namespace}"[:63]
    kube.apply(
        json.dumps(
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": name},
                "handler": "ascend",
            }
        )
    )
    try:
        app_args("--ascend-runtime-class-name", name)
        npu = FAMILIES.by_type()["Ascend910B3"]
        created = _created(kube, namespace, json.loads(manifest("npu", npu)))
        spec = created["spec"]
        assert spec["schedulerName"] == SCHEDULER_NAME
        assert spec["runtimeClassName"] == name
    finally:
        kube("delete", "runtimeclass", name, "--ignore-not-found")


def test_without_enable_ascend_ascend_pods_are_left_to_the_default_scheduler(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    app_args: Callable[..., None],
) -> None:
    """As HAMi's scheduler without --enable-ascend (its chart's default): our webhook leaves
    a pod asking Ascend NPUs to the default scheduler and the vendor's device plugin, and
    still claims the other families' pods (Iluvatar's flag is on here)."""
    app_args("--enable-ascend=false")
    npu = FAMILIES.by_type()["Ascend910B3"]
    created = _created(kube, namespace, json.loads(manifest("npu", npu)))
    assert created["spec"].get("schedulerName") == "default-scheduler"
    assert "runtimeClassName" not in created["spec"]
    gpu = FAMILIES.by_type()["MR-V100"]
    assert (
        _created(kube, namespace, json.loads(manifest("gpu", gpu)))["spec"]["schedulerName"]
        == SCHEDULER_NAME
    )
