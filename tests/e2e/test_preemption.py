"""GPU-aware preemption (hami serve --preemption) on a real kube-apiserver and kube-scheduler.

A full Lab 14 node (4 x T4) carries low-priority GPU pods, each pinned to its card
(nvidia.com/use-gpuuuid) so the starting state is exact. kube-scheduler's own
preemption finds no victim for a card slice (its dry run ignores nvidia.com/gpumem); ours
evicts through the Eviction API. The node simulator completes every deletion at once; a
finalizer on the low-priority pods keeps an evicted victim terminating until the test lets it
go, as a real pod takes its grace period to stop.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.chartrun import chart_scheduler
from tests.e2e.lab14 import NODE, UUIDS

from .cluster import ControlPlane, NodeSim
from .kube import Kube, wait_for
from .nodespec import t4_node

pytestmark = pytest.mark.e2e

PRIORITY_CLASSES = """\
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: hami-e2e-low}
value: 100
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: hami-e2e-high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: hami-e2e-high-never}
value: 1000
preemptionPolicy: Never
"""


FINALIZER = "e2e.hami.io/terminating"


def gpu_pod(name: str, mem: int, priority: str, policy: str = "binpack", card: str = "") -> str:
    """kubectl's manifest of a pod of priority class hami-e2e-<priority> under `policy`, pinned
    to `card` when given; a low one lingers behind FINALIZER so that its eviction can be seen."""
    pin = f", nvidia.com/use-gpuuuid: {card}" if card else ""
    lingers = f"\n  finalizers: [{FINALIZER}]" if priority == "low" else ""
    return f"""\
apiVersion: v1
kind: Pod
metadata:
  name: {name}{lingers}
  labels: {{tier: {priority}}}
  annotations: {{hami.io/gpu-scheduler-policy: {policy}{pin}}}
spec:
  priorityClassName: hami-e2e-{priority}
  terminationGracePeriodSeconds: 0
  containers:
  - name: cuda
    image: busybox
    resources: {{limits: {{nvidia.com/gpu: 1, nvidia.com/gpumem: {mem}}}}}
"""


def start_low(kube: Kube, ns: str, pods: list[tuple[str, int, int]]) -> None:
    """(name, MiB, card index) in creation order, each started a second after the last:
    kube-scheduler's rules prefer to evict the pod that started last, at second resolution."""
    for name, mem, card in pods:
        kube.apply(gpu_pod(name, mem, "low", card=UUIDS[card]), ns)
        kube.wait_ready(ns, [name])
        time.sleep(1.1)


def exists(kube: Kube, ns: str, name: str) -> bool:
    """Present and not terminating."""
    result = kube("get", "pod", name, "-n", ns, "-o", "json", check=False)
    return result.returncode == 0 and '"deletionTimestamp"' not in result.stdout


def drop_finalizer(kube: Kube, ns: str, ref: str) -> None:
    patch = '{"metadata":{"finalizers":null}}'
    kube("patch", ref, "-n", ns, "--type=merge", "-p", patch, check=False)


def let_go(kube: Kube, ns: str, name: str) -> None:
    """The victim finishes terminating (its finalizer removed)."""
    drop_finalizer(kube, ns, f"pod/{name}")
    wait_for(
        lambda: kube("get", "pod", name, "-n", ns, check=False).returncode != 0,
        timeout=30,
        what=f"{name} to be gone",
    )


def evicted(kube: Kube, ns: str, name: str) -> Callable[[], bool]:
    return lambda: terminating_by_preemption(kube, ns, name)


def terminating_by_preemption(kube: Kube, ns: str, name: str) -> bool:
    pod = kube.pod(ns, name)
    reasons = [
        c.get("reason")
        for c in pod["status"].get("conditions", [])
        if c["type"] == "DisruptionTarget" and c["status"] == "True"
    ]
    return bool(pod["metadata"].get("deletionTimestamp")) and reasons == ["PreemptionByScheduler"]


def card_of(kube: Kube, ns: str, name: str) -> str:
    allocated = kube.pod_annotation(ns, name, "hami.io/vgpu-devices-allocated") or ""
    return allocated.split(",")[0]


def wait_bound(kube: Kube, ns: str, name: str, timeout: float = 60) -> None:
    wait_for(
        lambda: bool(kube.pod(ns, name)["spec"].get("nodeName")),
        timeout=timeout,
        what=f"{name} to be bound\n{kube.describe_pod(ns, name)}",
    )


def messages(kube: Kube, ns: str, name: str, reason: str) -> list[str]:
    return [e.get("message", "") for e in kube.pod_events(ns, name) if e.get("reason") == reason]


def explain(plane: ControlPlane, ns: str, pod: str, *flags: str) -> str:
    argv = [
        sys.executable,
        "-m",
        "hami",
        "explain",
        f"{ns}/{pod}",
        "--kubeconfig",
        str(plane.kubeconfig),
        *flags,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout


def metric(plane: ControlPlane, line_start: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{plane.metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start)
    )


@pytest.fixture
def lab_node(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> Iterator[ControlPlane]:
    kube.apply(PRIORITY_CLASSES)
    nodesim(t4_node(NODE, UUIDS))
    yield control_plane
    # The namespace's pods are force-deleted next; a finalizer would hold them.
    for name in kube("get", "pods", "-n", namespace, "-o", "name").stdout.split():
        drop_finalizer(kube, namespace, name)


def test_binpack_then_mutex_preempt_the_pods_kube_schedulers_rules_pick(
    lab_node: ControlPlane, kube: Kube, namespace: str, app_args: Callable[..., None]
) -> None:
    app_args("--preemption=true")
    ns = namespace
    # Every card has 7360 MiB free; card 3 is held by a pod of high priority, never a victim.
    kube.apply(gpu_pod("keeper", 8000, "high", card=UUIDS[3]), ns)
    kube.wait_ready(ns, ["keeper"])
    start_low(
        kube, ns, [("low-a", 8000, 0), ("low-b", 8000, 1), ("low-c", 4000, 2), ("low-d", 4000, 2)]
    )

    # 11000 MiB: evicting the last-started pod (low-d, 4000 MiB on card 2) is enough, and the
    # reprieve walk (oldest first) spares low-a, low-b and low-c.
    kube.apply(gpu_pod("hi-binpack", 11000, "high"), ns)
    uid = kube.pod(ns, "hi-binpack")["metadata"]["uid"]
    wait_for(
        lambda: (
            f"Preempted by pod {uid} on node {NODE}" in messages(kube, ns, "low-d", "Preempted")
        ),
        timeout=60,
        what=f"the victim's Preempted event\n{kube.describe_pod(ns, 'hi-binpack')}",
    )
    # While the victim terminates: it carries kube-scheduler's own preemption mark, the
    # preemptor is nominated to the node and waits, and the freed slice is held for it.
    wait_for(lambda: terminating_by_preemption(kube, ns, "low-d"), timeout=30, what="the mark")
    assert all(exists(kube, ns, p) for p in ("low-a", "low-b", "low-c", "keeper"))
    wait_for(
        lambda: kube.pod(ns, "hi-binpack")["status"].get("nominatedNodeName") == NODE,
        timeout=30,
        what="hi-binpack's nominatedNodeName",
    )
    wait_for(
        lambda: "held for this pod" in (kube.pod_scheduled_message(ns, "hi-binpack") or ""),
        timeout=30,
        what="the hold in hi-binpack's PodScheduled condition",
    )
    assert not kube.pod(ns, "hi-binpack")["spec"].get("nodeName")
    let_go(kube, ns, "low-d")
    wait_bound(kube, ns, "hi-binpack")
    assert card_of(kube, ns, "hi-binpack") == UUIDS[2]
    assert all(exists(kube, ns, p) for p in ("low-a", "low-b", "low-c", "keeper"))

    # mutex needs an empty card: card 2 now holds hi-binpack (high) and card 3 the keeper, so
    # card 0 or 1 is emptied; the reprieve walk spares the older low-a and evicts low-b.
    kube.apply(gpu_pod("hi-mutex", 1000, "high", policy="mutex"), ns)
    wait_for(lambda: terminating_by_preemption(kube, ns, "low-b"), timeout=60, what="low-b evicted")
    let_go(kube, ns, "low-b")
    wait_bound(kube, ns, "hi-mutex")
    assert card_of(kube, ns, "hi-mutex") == UUIDS[1]
    assert not exists(kube, ns, "low-b")
    assert all(exists(kube, ns, p) for p in ("low-a", "low-c", "keeper", "hi-binpack"))
    kube.wait_ready(ns, ["hi-binpack", "hi-mutex"])
    assert metric(lab_node, 'hami_preemptions_total{outcome="done"') == 2


def test_a_disruption_budget_that_forbids_the_eviction_leaves_the_pod_pending(
    lab_node: ControlPlane, kube: Kube, namespace: str, app_args: Callable[..., None]
) -> None:
    app_args("--preemption=true")
    ns = namespace
    start_low(kube, ns, [(f"low-{i}", 8000, i) for i in range(4)])
    kube.apply(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: keep-low}\n"
        "spec: {minAvailable: 4, selector: {matchLabels: {tier: low}}}\n",
        ns,
    )
    # No kube-controller-manager here: the budget's status is what its controller would write.
    kube(
        "patch",
        "pdb",
        "keep-low",
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"observedGeneration":1,"disruptionsAllowed":0,"currentHealthy":4,'
        '"desiredHealthy":4,"expectedPods":4}}',
    )
    kube.apply(gpu_pod("hi", 11000, "high"), ns)

    def refused() -> bool:
        return any("disruption budget" in m for m in messages(kube, ns, "hi", "FailedPreemption"))

    wait_for(refused, timeout=60, what=f"a FailedPreemption event\n{kube.describe_pod(ns, 'hi')}")
    wait_for(
        lambda: "preemption: eviction of" in (kube.pod_scheduled_message(ns, "hi") or ""),
        timeout=60,
        what="the refusal in the pod's PodScheduled condition",
    )
    assert not kube.pod(ns, "hi")["spec"].get("nodeName")
    assert all(exists(kube, ns, f"low-{i}") for i in range(4))
    assert (
        metric(lab_node, 'hami_preemptions_total{outcome="refused",reason="disruption-budget"}')
        >= 1
    )


def waits_and_evicts_nothing(kube: Kube, ns: str, manifest: str, name: str) -> None:
    kube.apply(manifest, ns)
    wait_for(
        lambda: "CardInsufficientMemory" in (kube.pod_scheduled_message(ns, name) or ""),
        timeout=30,
        what=f"{name} to be refused for memory",
    )
    time.sleep(5)
    assert all(exists(kube, ns, f"low-{i}") for i in range(4))


def test_never_preempts_with_preemption_off_or_with_preemption_policy_never(
    lab_node: ControlPlane, kube: Kube, namespace: str, app_args: Callable[..., None]
) -> None:
    ns = namespace
    start_low(kube, ns, [(f"low-{i}", 8000, i) for i in range(4)])
    # Off (the default): HAMi's behaviour, the pod waits.
    waits_and_evicts_nothing(kube, ns, gpu_pod("hi", 11000, "high"), "hi")
    # hami explain quotes kube-scheduler's own preemption, then tells what --preemption would do.
    out = explain(lab_node, ns, "hi")
    condition = kube.pod_scheduled_message(ns, "hi") or ""
    said = condition[condition.rindex("preemption: ") :]
    assert f"\n  {said}\n" in out, out
    would = f"with hami serve --preemption: evict 1 pod(s) on node {NODE}; it then fits on cards"
    assert f"  {would} {UUIDS[3]}\n" in out, out
    assert f"{ns}/low-3: priority 100 < 1000, holds 8000 MiB of {UUIDS[3]}" in out, out
    kube("delete", "pod", "hi", "-n", ns, "--wait=true")

    app_args("--preemption=true")
    waits_and_evicts_nothing(kube, ns, gpu_pod("never", 11000, "high-never"), "never")
    assert not kube.pod(ns, "never")["spec"].get("nodeName")
    assert not messages(kube, ns, "never", "Preempting")
    assert "preemption: never (preemptionPolicy: Never)" in explain(
        lab_node, ns, "never", "--preemption"
    )


def test_two_high_priority_pods_at_once_evict_one_pod_each(
    lab_node: ControlPlane, kube: Kube, namespace: str, app_args: Callable[..., None]
) -> None:
    app_args("--preemption=true")
    ns = namespace
    start_low(kube, ns, [(f"low-{i}", 8000, i) for i in range(4)])
    kube.apply(gpu_pod("hi-1", 11000, "high") + "---\n" + gpu_pod("hi-2", 11000, "high"), ns)
    for victim in ("low-2", "low-3"):
        wait_for(evicted(kube, ns, victim), timeout=60, what=f"{victim} evicted")
    time.sleep(3)  # nothing more is evicted while the two victims terminate
    assert [exists(kube, ns, f"low-{i}") for i in range(4)] == [True, True, False, False]
    let_go(kube, ns, "low-2")
    let_go(kube, ns, "low-3")
    wait_bound(kube, ns, "hi-1")
    wait_bound(kube, ns, "hi-2")
    # The two pods started last are the victims; the older two stay.
    assert [exists(kube, ns, f"low-{i}") for i in range(4)] == [True, True, False, False]
    assert {card_of(kube, ns, "hi-1"), card_of(kube, ns, "hi-2")} == {UUIDS[2], UUIDS[3]}


def test_a_victim_that_outlives_the_hold_keeps_its_card_and_nothing_more_is_preempted(
    lab_node: ControlPlane, kube: Kube, namespace: str, app_args: Callable[..., None]
) -> None:
    app_args("--preemption=true", "--preemption-hold-seconds=2")
    ns = namespace
    start_low(kube, ns, [(f"low-{i}", 8000, i) for i in range(4)])
    kube.apply(gpu_pod("hi", 11000, "high"), ns)
    wait_for(lambda: terminating_by_preemption(kube, ns, "low-3"), timeout=60, what="low-3 evicted")
    # Grace 0 + 2 s hold, then the cache's expiry pass (every 5 s) drops it.
    wait_for(
        lambda: "hold on their cards has expired" in (kube.pod_scheduled_message(ns, "hi") or ""),
        timeout=60,
        what=f"the expired hold in hi's PodScheduled condition\n{kube.describe_pod(ns, 'hi')}",
    )
    assert [exists(kube, ns, f"low-{i}") for i in range(4)] == [True, True, True, False]
    assert not kube.pod(ns, "hi")["spec"].get("nodeName")
    let_go(kube, ns, "low-3")
    wait_bound(kube, ns, "hi")
    assert card_of(kube, ns, "hi") == UUIDS[3]


def test_the_charts_service_account_may_carry_out_a_preemption(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    tmp_path: Path,
) -> None:
    """hami serve as the chart renders it with preemption on, under the chart's RBAC: the
    budget list, the eviction, the victim's and the preemptor's status writes are allowed."""
    ns = namespace
    kube.apply(PRIORITY_CLASSES)
    with chart_scheduler(
        control_plane, kube, ns, tmp_path, "scheduler.preemption.enabled=true"
    ) as args:
        assert "--preemption=true" in args
        nodesim(t4_node("chart-preempt", ["GPU-chart-preempt-0"]))
        try:
            kube.apply(gpu_pod("low", 8000, "low"), ns)
            kube.wait_ready(ns, ["low"])
            kube.apply(gpu_pod("hi", 11000, "high"), ns)
            wait_for(evicted(kube, ns, "low"), timeout=60, what=kube.describe_pod(ns, "hi"))
            wait_for(
                lambda: kube.pod(ns, "hi")["status"].get("nominatedNodeName") == "chart-preempt",
                timeout=30,
                what="hi's nominatedNodeName",
            )
            drop_finalizer(kube, ns, "pod/low")
            wait_bound(kube, ns, "hi")
            assert "Forbidden" not in control_plane.app_log.read_text()
        finally:
            drop_finalizer(kube, ns, "pod/low")
