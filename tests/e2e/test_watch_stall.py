"""A pods or nodes watch out of touch while writes still pass, on the real control plane.

The fault proxy (tests.e2e.faultproxy) sits between our process and kube-apiserver: it refuses
our LIST and WATCH of pods (or nodes) and cuts the watch under way, while single-pod reads,
Bindings and node-lock writes go through, as when API Priority and Fairness throttles lists,
a load balancer cuts long-lived connections or a relist after a restart takes long. What is
checked is what our scheduler bound, read from a fresh LIST: no card ever holds more than it
has. The node simulator plays kubelet and HAMi's device plugin (pods' readiness is its).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from tests.e2e.binds import POD, bound, probe, readyz

from . import invariant
from .cluster import AS_PLUGIN, ControlPlane, FaultyApi, NodeSim
from .faults import cut_off, faults_on
from .kube import Kube, eventually, wait_for
from .nodespec import t4_node
from .prometheus import get

pytestmark = pytest.mark.e2e

# A whole card: nvidia.com/gpu alone (HAMi's default memory is the whole card).
WHOLE_CARD = POD.replace(", nvidia.com/gpumem: 1000", "")
PODS = r"^/api/v1/pods$"  # the cluster-wide LIST and WATCH of the pods informer
NODES = r"^/api/v1/nodes$"


def lists_of(control_plane: ControlPlane, resource: str) -> int:
    """How many complete lists of `resource` our process has logged."""
    log = control_plane.app_log.read_text(errors="replace").splitlines()
    return sum(1 for line in log if '"listed"' in line and f'resource="{resource}"' in line)


def test_a_refused_pod_watch_never_puts_two_whole_card_pods_on_one_card(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    faulty: FaultyApi,
) -> None:
    nodesim(t4_node("stall-a"), t4_node("stall-b"))  # 8 cards
    cut_off(faulty, PODS, "/api/v1/pods")
    for i in range(16):
        kube.apply(WHOLE_CARD.format(name=f"whole-{i}"), namespace)

    # The fault holds until our scheduler says it is blind (it bound pods the watch does not
    # show), or until more pods are bound than there are cards, which is the failure.
    def settled() -> str:
        if len(bound(kube, namespace)) > 8:
            return "over-committed"
        status, text = readyz(control_plane)
        return f"blind: {text}" if status == 503 else ""

    outcome = wait_for(settled, 120, interval=0.5, what="blindness or an over-commit")
    assert outcome.startswith("blind: "), (outcome, bound(kube, namespace))
    assert "has not shown up on the pods watch" in outcome
    assert invariant.overcommitted(kube) == []

    faulty.set()  # the watch comes back: the relist settles what was bound meanwhile
    wait_for(lambda: readyz(control_plane)[0] == 200, 60, what="/readyz after the relist")
    assert len(bound(kube, namespace)) == 8
    assert invariant.overcommitted(kube) == []
    kube.wait_ready(namespace, bound(kube, namespace), timeout=120)
    invariant.consistent(kube, control_plane)


def _etcd(control_plane: ControlPlane, path: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{control_plane.etcd_port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: dict[str, object] = json.loads(response.read())
        return answer


def compact(control_plane: ControlPlane) -> None:
    """Compact etcd to its current revision: a watch resumed from before it gets a 410."""
    header = _etcd(control_plane, "/v3/kv/range", {"key": base64.b64encode(b"\0").decode()})
    revision = int(header["header"]["revision"])  # type: ignore[index]
    _etcd(control_plane, "/v3/kv/compaction", {"revision": revision, "physical": True})


def test_watch_cuts_with_compaction_under_churn_never_over_commit(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    faulty: FaultyApi,
) -> None:
    """Rounds of: cut the pods watch, delete a running pod, create pods in two waves while it
    is cut (the second once the first's binds have gone unconfirmed long enough for the
    scheduler to react), compact etcd, let the watch back. After every round a fresh LIST has
    no card over capacity and our /metrics equal a cache rebuilt from it."""
    nodesim(t4_node("churn-a"))  # 4 cards
    for round_ in range(3):
        cut_off(faulty, PODS, "/api/v1/pods")
        running = bound(kube, namespace)
        if running:
            kube("delete", "pod", "-n", namespace, running[0], "--wait=false")
        for wave in range(2):
            names = [f"churn-{round_}-{wave}-{i}" for i in range(3)]
            reacted = reactions(control_plane)
            for name in names:
                kube.apply(WHOLE_CARD.format(name=name), namespace)
            wait_for(lambda: tried(kube, namespace, names), 90, what=f"{names} tried")  # noqa: B023
            if wave == 0 and set(bound(kube, namespace)) & set(names):
                # Binds landed that the cut watch does not show: wait until the scheduler
                # reacts to that (it turns blind; a scheduler that lets unconfirmed binds
                # lapse logs that they expired) before the second wave.
                wait_for(
                    lambda: reactions(control_plane) > reacted,  # noqa: B023
                    60,
                    what="the scheduler to react to binds the watch does not show",
                )
            assert invariant.overcommitted(kube) == [], f"round {round_} wave {wave}"
        compact(control_plane)
        faulty.set()  # the watch resumes where it was cut, or relists if that is compacted away
        wait_for(lambda: readyz(control_plane)[0] == 200, 60, what="/readyz after the cut")
        assert invariant.overcommitted(kube) == [], f"round {round_}"
        # Pods refused earlier may be placed meanwhile: the views agree once binds settle.
        eventually(lambda: invariant.consistent(kube, control_plane), 60)


def reactions(control_plane: ControlPlane) -> int:
    """/readyz refusals for blindness plus reservations logged as expired, so far."""
    blind = 1 if readyz(control_plane)[0] == 503 else 0
    log = control_plane.app_log.read_text(errors="replace")
    return blind + log.count('"reservation expired without a bind"')


def tried(kube: Kube, namespace: str, names: list[str]) -> bool:
    """Whether kube-scheduler has tried each of the pods (bound, or refused for now)."""
    pods = json.loads(kube("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    conditions = {
        p["metadata"]["name"]: {c["type"] for c in p["status"].get("conditions") or ()}
        for p in pods
    }
    return all("PodScheduled" in conditions.get(name, ()) for name in names)


def test_a_node_made_again_while_the_watch_was_cut_is_counted_after_the_relist(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    faulty: FaultyApi,
) -> None:
    node = t4_node("remade")
    nodesim(node)
    wait_for(lambda: node.cards[0].uuid in invariant.served(control_plane), 30)
    # 410: the watch cannot resume where it was cut, as after etcd compacted past it.
    cut_off(faulty, NODES, "/api/v1/nodes", status=410)
    cut = faults_on(faulty, "/api/v1/nodes")
    obj = kube.get("node", node.name)
    old_uid = obj["metadata"]["uid"]
    kube("delete", "node", node.name, "--wait=true")
    fresh = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": obj["metadata"].get("labels") or {},
            "annotations": obj["metadata"].get("annotations") or {},
        },
    }
    # As HAMi's device plugin registers a node: its identity may write the registration.
    kube("create", *AS_PLUGIN, "-f", "-", stdin=json.dumps(fresh))
    # What the kubelet reports (the simulator's allocatable nvidia.com/gpu), as a real one would.
    status = json.dumps({"status": {"allocatable": obj["status"]["allocatable"]}})
    kube("patch", "node", node.name, "--subresource=status", "--type=merge", "-p", status)
    assert kube.get("node", node.name)["metadata"]["uid"] != old_uid
    # Our process has met the 410 itself (not only the cut), so it must list again.
    wait_for(lambda: faults_on(faulty, "/api/v1/nodes") > cut, 30, what="a 410 on a nodes watch")
    relists = lists_of(control_plane, "nodes")
    faulty.set()
    # The relist shows the new Node, then deletes the old uid: the cards must stay known.
    wait_for(lambda: lists_of(control_plane, "nodes") > relists, 60, what="the nodes relist")
    assert node.cards[0].uuid in invariant.served(control_plane)
    kube.apply(WHOLE_CARD.format(name="on-remade"), namespace)
    wait_for(lambda: bound(kube, namespace) == ["on-remade"], 60, what="the pod placed")


def test_a_replica_blind_past_its_bound_gives_up_and_says_why(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    faulty: FaultyApi,
    app_args: Callable[..., None],
) -> None:
    """Blind for longer than --blind-give-up-seconds (3 here, 120 by default), the process
    fails its liveness probes, so the kubelet would restart it and the kube-scheduler beside it
    (whose Lease the other replica then takes), and says why once, in its log and an Event."""
    app_args(
        "--kubeconfig",
        str(faulty.kubeconfig),
        "--blind-give-up-seconds",
        "3",
        "--pod-namespace",
        namespace,
        "--identity",
        "hami-blind",
    )
    nodesim(t4_node("give-up"))
    # Our pods watch (and every relist) refused while Bindings pass: the pod we bind is never
    # shown, the watch lags past its limit, and the relist asked for cannot help.
    cut_off(faulty, PODS, "/api/v1/pods")
    kube.apply(WHOLE_CARD.format(name="unseen"), namespace)

    def given_up() -> str:
        status, text = probe(control_plane, "/healthz")
        return text if status == 503 else ""

    why = wait_for(given_up, 120, what="/healthz failing once blind past the bound")
    assert "--blind-give-up-seconds" in why and "pods watch" in why, why
    assert probe(control_plane, "/healthz/pair")[0] == 503  # kube-scheduler's liveness too
    event = wait_for(
        lambda: [
            e for e in kube.pod_events(namespace, "hami-blind") if e["reason"] == "BlindRestart"
        ],
        60,
        what="the BlindRestart Event",
    )
    assert event[0]["type"] == "Warning" and "blind for" in event[0]["message"]
    log = control_plane.app_log.read_text(errors="replace")
    assert log.count("giving up: restarting to see again") == 1
    assert "hami_cache_forced_relists_total" in get(control_plane.metrics_url, timeout=10).decode()

    faulty.set()  # in touch again: the relist settles the bind, and health comes back
    wait_for(lambda: probe(control_plane, "/healthz") == (200, "ok"), 120, what="/healthz ok")
    assert readyz(control_plane) == (200, "ok")
