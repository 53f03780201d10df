"""`hami serve --device-config-file` on the real control plane: a device config renaming one
family's resources (Hygon's `hygon.com/dcunum` to `example.com/dcu`, as HAMi's chart's
device-config override would) is used by every part of the process. A pod asking the renamed
resource is claimed by our webhook, placed by kube-scheduler through our extender on a node
whose Hygon plugin advertises that name, bound with Hygon's allocation annotation, counted on
its card by our metrics and released; a pod asking the default name is no longer ours.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from hami.engine.families.registry import from_device_config
from hami.engine.inventory import pod_allocation

from .cluster import RENAMED_DCU, SCHEDULER_NAME, ControlPlane, NodeSim
from .kube import Kube, wait_for
from .nodespec import family_node
from .test_families import manifest, shared

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
    held = pod_allocation(pod, families)
    assert held is not None
    cards = {d.uuid for c in held.family_devices for d in c}
    assert cards, annotations
    wait_for(
        lambda: all((shared(control_plane, u) or 0) >= 1 for u in cards),
        timeout=60,
        what="the metrics to count the pod on its card",
    )
    kube("delete", "pod", "renamed", "-n", namespace, "--wait=true", "--timeout=60s")
    wait_for(
        lambda: all(shared(control_plane, u) == 0 for u in cards),
        timeout=60,
        what="the card to be counted free",
    )

    # The chart's default name is no DCU of this process: the webhook leaves its pod alone.
    default = json.loads(manifest("default-name", from_device_config({}).by_type()["DCU"]))
    assert "hygon.com/dcunum" in default["spec"]["containers"][0]["resources"]["limits"]
    created = kube(
        "create",
        "--dry-run=server",
        "-o",
        "json",
        "-n",
        namespace,
        "-f",
        "-",
        stdin=json.dumps(default),
    )
    assert json.loads(created.stdout)["spec"].get("schedulerName") == "default-scheduler"
