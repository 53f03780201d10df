"""Binds whose outcome is unknown, on the real control plane: they never stop scheduling.

A Binding whose answer is lost while its pod cannot be read back (an API server restarting,
or overloaded) may or may not have landed. Its cards stay counted, and the pod is read back
until it says (hami.service.outcomes); nothing waits for a watch event that may never come,
so every other pod is placed meanwhile and the replica stays ready. The fault proxy
(tests.e2e.faultproxy) refuses on loopback what a test says; kube-scheduler is frozen or
kube-apiserver killed by the harness (tests.e2e.cluster). What is checked is what our
scheduler bound and counted, against a fresh LIST. The node simulator plays kubelet and HAMi's
device plugin (pods' readiness, the lock's release and the bind phase are its).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.binds import POD, bound, readyz

from . import invariant
from .cluster import ControlPlane, FaultyApi, NodeSim
from .kube import Kube, KubectlError, wait_for
from .nodespec import t4_node
from .prometheus import get

pytestmark = pytest.mark.e2e

BINDING = r"^/api/v1/namespaces/[^/]+/pods/[^/]+/binding$"
# Long enough that, before unknown outcomes were followed, the pod's reservation waited past
# --watch-lag-limit-seconds (10) and blinded the replica for good.
PAUSE = 15.0


def samples(control_plane: ControlPlane, name: str) -> dict[str, float]:
    """The series of metric family `name` on our /metrics, by their labels."""
    text = get(control_plane.metrics_url, timeout=10).decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[json.dumps(sample.labels, sort_keys=True)] = sample.value
    return found


def unknown_outcomes(control_plane: ControlPlane) -> dict[str, float]:
    """hami_bind_unknown_outcomes_total by how each ended (0s left out)."""
    found = samples(control_plane, "hami_bind_unknown_outcomes_total")
    return {json.loads(k)["ended"]: v for k, v in found.items() if v}


def test_one_unknown_bind_outcome_never_stops_scheduling(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    faulty: FaultyApi,
) -> None:
    nodesim(t4_node("unknown-a"))
    victim = f"^/api/v1/namespaces/{namespace}/pods/victim$"
    # The victim's Binding is refused without reaching kube-apiserver, and reading the pod back
    # fails a few times: the bind cannot tell whether it landed.
    faulty.set(
        {"method": "POST", "path": BINDING, "action": "refuse", "status": 503, "times": 1},
        {"method": "GET", "path": victim, "action": "refuse", "status": 503, "times": 3},
    )
    kube.apply(POD.format(name="victim"), namespace)
    wait_for(
        lambda: [a for a in faulty.acted("refuse POST") if f"/{namespace}/" in a],
        60,
        what="the victim's Binding refused",
    )
    # kube-scheduler cannot retry for a while, as during an API server outage; pods keep
    # coming meanwhile.
    with control_plane.scheduler_paused():
        for i in range(4):
            kube.apply(POD.format(name=f"later-{i}"), namespace)
        time.sleep(PAUSE)
        assert readyz(control_plane)[0] == 200  # one pod's lost answer does not blind us
    pods = ["victim", *(f"later-{i}" for i in range(4))]
    kube.wait_ready(namespace, pods, timeout=120)
    assert bound(kube, namespace) == sorted(pods)
    assert readyz(control_plane) == (200, "ok")
    wait_for(
        lambda: samples(control_plane, "hami_bind_outcomes_unknown") == {"{}": 0.0},
        60,
        what="no pod left being read back",
    )
    assert sum(unknown_outcomes(control_plane).values()) >= 1, unknown_outcomes(control_plane)
    invariant.consistent(kube, control_plane)


def test_a_crashed_api_server_during_a_burst_leaves_nothing_blind(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    faulty: FaultyApi,
) -> None:
    """kube-apiserver killed (-9) in the middle of a 200-pod burst and back 10 s later,
    answering its first Bindings and pod reads with 500 as one does while it starts (the fault
    proxy plays that part, so that binds of unknown outcome are met every time): every pod is
    bound within a few minutes of its return (the timeout is a failure guard, not a figure),
    and no card is over capacity."""
    nodesim(*(t4_node(f"crash-{i}") for i in range(5)))  # 5 x 4 cards x 10 slots: 200 pods
    pods = [f"burst-{i}" for i in range(200)]
    manifest = "---\n".join(POD.format(name=name) for name in pods)

    def create() -> None:
        # Creates stop where kube-apiserver dies; the rest are created again once it is back.
        with contextlib.suppress(KubectlError):
            kube.apply(manifest, namespace)

    creating = threading.Thread(target=create)
    creating.start()
    wait_for(lambda: len(bound(kube, namespace)) >= 20, 120, what="the burst under way")
    pod_read = f"^/api/v1/namespaces/{namespace}/pods/[^/]+$"
    faulty.set(
        {"method": "POST", "path": BINDING, "action": "refuse", "status": 500, "times": 2},
        {"method": "GET", "path": pod_read, "action": "refuse", "status": 500, "times": 2},
    )
    control_plane.crash_apiserver(down=10.0)
    back = time.monotonic()
    creating.join(timeout=300)
    kube.apply(manifest, namespace)
    wait_for(
        lambda: len(bound(kube, namespace)) == len(pods),
        300,
        interval=2.0,
        what="every pod of the burst bound after kube-apiserver came back",
    )
    print(
        f"all {len(pods)} pods bound {time.monotonic() - back:.0f}s after kube-apiserver was "
        f"back; unknown outcomes: {unknown_outcomes(control_plane)}"
    )
    # Two Bindings met a starting API server (the proxy's log is the session's: this test's
    # namespace only).
    assert len([a for a in faulty.acted("refuse POST") if f"/{namespace}/" in a]) == 2
    assert sum(unknown_outcomes(control_plane).values()) >= 1, unknown_outcomes(control_plane)
    wait_for(lambda: readyz(control_plane)[0] == 200, 60, what="/readyz after the crash")
    wait_for(
        lambda: samples(control_plane, "hami_bind_outcomes_unknown") == {"{}": 0.0},
        120,
        what="no pod left being read back",
    )
    # The device plugin stand-in may refuse a pod whose Allocate it was in the middle of when
    # kube-apiserver died (its retry finds its own first write done), as HAMi's plugin would:
    # the plugin's outcome, not what our scheduler wrote, which is what is checked.
    invariant.consistent(kube, control_plane, plugin_refusals=True)
