"""`hami status` from a cache and a pod list: the cards as the scheduler counts them, the pods in
the lab's lab-card form, the GPU pods still waiting with kube-scheduler's reason."""

from pathlib import Path
from typing import Any

import orjson

from hami.cache.store import ClusterCache
from hami.engine.model import ContainerDevice, DeviceInfo
from hami.engine.requests import ResourceDefaults
from hami.runtime.choices import serve_defaults
from hami.service.annotations import allocation_annotations
from hami.service.status import NOT_TRIED, render_json, render_text, status
from hami.sim.run import Simulation
from hami.sim.scenario import load
from tests.builders import FAMILIES, gpu_pod, registered_node
from tests.reference.lab14 import SCENARIO, STEP_7

NODE = "node-a"
CARDS = (
    DeviceInfo("GPU-a", 0, 10, 15360, 100, "NVIDIA-Tesla T4"),
    DeviceInfo("GPU-b", 1, 4, 15360, 100, "NVIDIA-Tesla T4", health=False),
)


def pod(name: str, limits: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return gpu_pod(name, "team", uid=name, limits=limits, **fields)


def bound(name: str, devices: tuple[ContainerDevice, ...]) -> dict[str, Any]:
    return pod(
        name,
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": devices[0].usedmem},
        annotations=allocation_annotations(NODE, (devices,), 0, families=FAMILIES),
        node=NODE,
        phase="Running",
    )


def cluster() -> tuple[ClusterCache, list[dict[str, Any]]]:
    cache = ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes(
        [registered_node(NODE, CARDS), {"metadata": {"name": "cpu-only"}, "status": {}}]
    )
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/2 nodes are available: 1 2/2 CardInsufficientMemory, 1 node unregistered.",
    }
    big = pod("big", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000})
    big["status"]["conditions"] = [unschedulable]
    pods = [
        bound("trainer", (ContainerDevice("GPU-a", 3000, 30),)),
        bound("notebook", (ContainerDevice("GPU-a", 1000, 0),)),
        big,
        pod("new", {"nvidia.com/gpu": 1}),
        pod("web", {"cpu": "1"}),  # no GPU: not listed
        {**bound("done", (ContainerDevice("GPU-b", 500, 0),)), "status": {"phase": "Succeeded"}},
    ]
    cache.replace_pods(pods)
    return cache, pods


def test_text() -> None:
    cache, pods = cluster()
    assert render_text(status(cache, pods, ResourceDefaults())) == [
        "NODE node-a",
        "  CARD  UUID   TYPE                         MEMORY MiB  CORES %  SLOTS  PODS",
        "  0     GPU-a  NVIDIA-Tesla T4              4000/15360   30/100   2/10  team/notebook team/trainer",
        "  1     GPU-b  NVIDIA-Tesla T4 (unhealthy)     0/15360    0/100    0/4  -",
        "",
        "1 more node(s) without HAMi's GPU registration",
        "",
        "PODS team",
        "big        <none>",
        "new        <none>",
        "notebook   GPU-a,NVIDIA,1000,0:;",
        "trainer    GPU-a,NVIDIA,3000,30:;",
        "",
        "PENDING GPU PODS: 2",
        "  team/big: 0/2 nodes are available: 1 2/2 CardInsufficientMemory, 1 node unregistered.",
        f"  team/new: {NOT_TRIED}",
    ]


def test_json() -> None:
    cache, pods = cluster()
    doc = orjson.loads(orjson.dumps(render_json(status(cache, pods, ResourceDefaults()))))
    (node,) = doc["nodes"]
    assert node["cards"][0] == {
        "index": 0,
        "uuid": "GPU-a",
        "type": "NVIDIA-Tesla T4",
        "healthy": True,
        "source": "device-plugin",
        "overcommitted": "",
        "memory_mib": {"allocated": 4000, "total": 15360},
        "cores_percent": {"allocated": 30, "total": 100},
        "slots": {"used": 2, "total": 10},
        "pods": [
            {"namespace": "team", "pod": "notebook", "container": 0, "memory": 1000, "cores": 0}
            | {"mig": "", "outside": False, "claim": False},
            {"namespace": "team", "pod": "trainer", "container": 0, "memory": 3000, "cores": 30}
            | {"mig": "", "outside": False, "claim": False},
        ],
    }
    assert node["cards"][1]["healthy"] is False
    assert [p["name"] for p in doc["pending"]] == ["big", "new"]
    assert doc["pending"][0]["pending"].startswith("0/2 nodes are available")
    assert doc["unregistered_nodes"] == 1


def test_lab14_step_7_as_the_labs_table_shows_it() -> None:
    sim = Simulation(load(Path(SCENARIO), families=FAMILIES), serve_defaults())
    sim.run()
    pods = [p.obj for p in sim.pods.values()]
    text = render_text(status(sim.cache, pods, ResourceDefaults()))
    start = text.index("PODS default") + 1
    assert "\n".join(text[start : start + 4]) + "\n" == STEP_7
    card_3c5f = next(line for line in text if "GPU-3c5f3637" in line and "/15360" in line)
    assert "2000/15360" in card_3c5f and "2/10" in card_3c5f
    assert "default/policy-binpack-solo default/policy-tenant" in card_3c5f
