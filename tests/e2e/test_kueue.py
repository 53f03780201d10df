"""Kueue queues and admits GPU Jobs, hami-py places them (docs/kueue.md, Kueue's "Using HAMi").

One simulated node with four T4s (the stand-in's 15360 MiB and 100 cores each), far more than
the ClusterQueue's quota: so a Job that waits, waits because Kueue counted
``nvidia.com/total-gpumem`` (gpumem times gpu, the page's transformation), not because any card
was short. Without the transformation the three Jobs would fit the quota.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator

import pytest
import yaml

from hami.engine.quantity import parse_quantity

from .cluster import SCHEDULER_NAME, ControlPlane, NodeSim
from .kube import Kube, Obj, eventually, wait_for
from .kueue import documented, ensure_kueue, running_kueue
from .nodespec import t4_node

pytestmark = pytest.mark.e2e

QUOTA = {"nvidia.com/gpu": 4, "nvidia.com/total-gpucores": 100, "nvidia.com/total-gpumem": 8000}
# name: (cards, gpumem per card, gpucores per card)
JOBS = {"one-card": (1, 3000, 30), "two-cards": (2, 2000, 20), "over-quota": (1, 2000, 20)}
ALLOCATED = re.compile(r"(?P<uuid>GPU-[^,]+),NVIDIA,(?P<mem>\d+),(?P<cores>\d+)")


@pytest.fixture(scope="module")
def kueue(control_plane: ControlPlane) -> Iterator[None]:
    with running_kueue(control_plane, ensure_kueue()):
        yield


@pytest.fixture
def queue(kube: Kube, namespace: str, kueue: None) -> Iterator[tuple[str, str]]:
    """docs/kueue.md's ResourceFlavor, ClusterQueue (named after the test, with QUOTA) and
    LocalQueue (in the test's namespace); the LocalQueue's and the ClusterQueue's names. The Jobs go first afterwards,
    so that Kueue releases their quota before the queues are deleted."""
    flavor = documented("ResourceFlavor")
    cluster_queue = documented("ClusterQueue")
    cluster_queue["metadata"]["name"] = f"{namespace}-cq"
    (group,) = cluster_queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == list(QUOTA)
    for resources in group["flavors"]:
        assert resources["name"] == flavor["metadata"]["name"]
        for resource in resources["resources"]:
            resource["nominalQuota"] = QUOTA[resource["name"]]
    local_queue = documented("LocalQueue")
    local_queue["metadata"]["namespace"] = namespace
    local_queue["spec"]["clusterQueue"] = cluster_queue["metadata"]["name"]
    kube.apply(yaml.safe_dump_all([flavor, cluster_queue, local_queue], sort_keys=False))
    name = local_queue["metadata"]["name"]
    yield name, cluster_queue["metadata"]["name"]
    kube("delete", "jobs", "--all", "-n", namespace, "--wait=true", timeout=90)
    kube("delete", "workloads", "--all", "-n", namespace, "--wait=true", timeout=90)
    kube("delete", "localqueue", name, "-n", namespace, timeout=90)
    kube("delete", "clusterqueue", cluster_queue["metadata"]["name"], timeout=90)


def job(name: str, queue: str) -> str:
    cards, mem, cores = JOBS[name]
    return f"""\
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  labels:
    kueue.x-k8s.io/queue-name: {queue}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: cuda
        image: nvidia/cuda:12.4.1-base-ubuntu22.04
        command: ["sleep", "infinity"]
        resources:
          limits:
            nvidia.com/gpu: {cards}
            nvidia.com/gpumem: {mem}
            nvidia.com/gpucores: {cores}
"""


def test_kueue_admits_within_quota_and_hami_places_what_it_admitted(
    kube: Kube, namespace: str, queue: tuple[str, str], nodesim: Callable[..., NodeSim]
) -> None:
    local_queue, cluster_queue = queue
    node = t4_node("kueue-node")
    nodesim(node)
    cards = {card.uuid for card in node.cards}

    for name in ("one-card", "two-cards"):
        kube.apply(job(name, local_queue), namespace)
    for name in ("one-card", "two-cards"):
        condition(workload(kube, namespace, name), "Admitted", "True")
        placed(kube, namespace, name, cards)
    # 3000 + 2 x 2000 MiB and 30 + 2 x 20 cores: per card times cards, as the page configures.
    expect_reserved(kube, cluster_queue, gpu=3, cores=70, mem=7000)

    kube.apply(job("over-quota", local_queue), namespace)
    pending = condition(workload(kube, namespace, "over-quota"), "QuotaReserved", "False")
    assert "nvidia.com/total-gpumem" in pending["message"], pending
    # Kueue holds it: suspended, so the job controller made no pod for any scheduler to see.
    assert kube.get("job", "over-quota", namespace)["spec"]["suspend"] is True
    assert pods(kube, namespace, "over-quota") == []

    # The one-card Job's container exits, as the kubelet would report it: Kueue frees its quota.
    (first,) = pods(kube, namespace, "one-card")
    kube(
        "patch", "pod", first["metadata"]["name"], "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": {"phase": "Succeeded"}}),
    )  # fmt: skip
    condition(workload(kube, namespace, "over-quota"), "Admitted", "True")
    placed(kube, namespace, "over-quota", cards)
    expect_reserved(kube, cluster_queue, gpu=3, cores=60, mem=6000)


def placed(kube: Kube, namespace: str, job_name: str, cards: set[str]) -> None:
    """The Job's one pod went through our webhook, was placed by our scheduler on the Job's
    cards and sizes, and the device plugin found its devices there."""
    (pod,) = wait_for(lambda: pods(kube, namespace, job_name), 60, what=f"{job_name}'s pod")
    name = pod["metadata"]["name"]
    assert pod["spec"]["schedulerName"] == SCHEDULER_NAME, "our webhook did not claim the pod"
    kube.wait_ready(namespace, [name])
    annotations = kube.pod(namespace, name)["metadata"]["annotations"]
    count, mem, cores = JOBS[job_name]
    allocated = annotations["hami.io/vgpu-devices-allocated"]
    devices = [m.groupdict() for m in ALLOCATED.finditer(allocated)]
    assert len(devices) == count, allocated
    assert {d["uuid"] for d in devices} <= cards, allocated
    assert {(d["mem"], d["cores"]) for d in devices} == {(str(mem), str(cores))}, allocated
    assert annotations["hami.io/bind-phase"] == "success"
    assert annotations["hami.io/vgpu-node"] == "kueue-node"


def pods(kube: Kube, namespace: str, job_name: str) -> list[Obj]:
    listing = kube(
        "get", "pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job_name}",
        "-o", "json",
    )  # fmt: skip
    items: list[Obj] = json.loads(listing.stdout)["items"]
    return items


def workload(kube: Kube, namespace: str, job_name: str) -> Callable[[], Obj | None]:
    """The Workload Kueue made for the Job (it names it after the Job plus a hash)."""

    def find() -> Obj | None:
        listing = json.loads(kube("get", "workloads", "-n", namespace, "-o", "json").stdout)
        for item in listing["items"]:
            owners = item["metadata"].get("ownerReferences", [])
            if any(o["kind"] == "Job" and o["name"] == job_name for o in owners):
                found: Obj = item
                return found
        return None

    return find


def condition(find: Callable[[], Obj | None], kind: str, status: str) -> Obj:
    """The Workload's condition `kind` once Kueue has set it to `status`."""

    def current() -> Obj | None:
        item = find()
        for c in (item or {}).get("status", {}).get("conditions", []):
            if c["type"] == kind and c["status"] == status:
                return dict(c)
        return None

    found = wait_for(current, 60, what=f"the Workload's condition {kind}={status}")
    assert found is not None
    return found


def expect_reserved(kube: Kube, cluster_queue: str, *, gpu: int, cores: int, mem: int) -> None:
    """The ClusterQueue's status.flavorsReservation comes to these totals (Kueue writes the
    ClusterQueue's status after admitting, not with it)."""
    expected = {
        "nvidia.com/gpu": gpu,
        "nvidia.com/total-gpucores": cores,
        "nvidia.com/total-gpumem": mem,
    }

    def check() -> None:
        status = kube.get("clusterqueue", cluster_queue).get("status", {})
        totals = {
            r["name"]: int(parse_quantity(r["total"]))
            for flavor in status.get("flavorsReservation", [])
            for r in flavor["resources"]
        }
        assert totals == expected

    eventually(check, timeout=60)
