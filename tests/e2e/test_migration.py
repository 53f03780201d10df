"""Replacing HAMi v2.10's scheduler and webhook with ours while its device plugin keeps running,
and going back, on the real control plane (docs/migrate-from-hami.md).

HAMi is in place as it leaves a cluster: its release's objects under its chart's names (stand-ins:
nothing runs them here), its kube-scheduler holding the `hami-scheduler` Lease in its namespace,
pods its scheduler placed (its allocation annotations, its node lock, its Binding, the device
plugin's Allocate played by the node simulator), one of them still being allocated with the
node lock held, and a node whose handshake HAMi <= v2.7 left as `Deleted_...`. Then:

1. forward: `helm install` of our chart with `migration.hamiNamespace` beside it (no object of
   HAMi's is touched or collides), `hami serve` run as that release renders it, and the Lease
   handed over as HAMi's kube-scheduler does when it is scaled to 0 (ours campaigns for the
   same Lease);
2. from a fresh LIST: HAMi's running pods keep their cards, the bind in flight completes with
   the lock it held, new pods are placed around both, no card is over its memory, cores or
   split count, no lock is left;
3. back: the Lease to HAMi's kube-scheduler again, `helm uninstall`; every GPU pod carries what
   HAMi's scheduler reads at start (`hami.io/vgpu-node` equal to its node, an allocation that
   decodes and adds up) and HAMi's objects are as they were.

Harness differences, as in tests/e2e/test_helm.py: `hami serve` runs here with the rendered
args (the harness's ports and certificate) under a token of the release's ServiceAccount; the
release's webhook points at a dead loopback port with `failurePolicy: Ignore` (the harness's
own webhook, the same code, mutates the pods); the harness's kube-scheduler asks ours for every
pod, so "HAMi's scheduler leads" means ours answers as a non-leader; the Lease hand-over is
written by the test. HAMi's MutatingWebhookConfiguration is not stood in for: the harness's
own is named `hami-webhook` too.

The node with the `Deleted_...` handshake is registered as HAMi v2.10 registers it: its
running pod keeps its card and a new pod goes to one of its free cards.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from hami.engine.codec import decode_pod_devices
from hami.engine.model import ContainerDevice
from hami.engine.names import ASSIGNED_NODE, NODE_LOCK
from hami.engine.nvidianames import DEVICES_ALLOCATED
from hami.service.annotations import allocation_annotations, allocation_labels
from tests import applog
from tests.builders import FAMILIES
from tests.unit.test_helm_render import CHART, EXTENDER, Obj, container, helm

from .cluster import AS_PLUGIN, DEVICE_PLUGIN_USER, SCHEDULER_USER, ControlPlane, NodeSim
from .invariant import locks_left, misplaced, overcommitted
from .kube import Kube, wait_for
from .nodespec import t4_node
from .test_helm import (
    BOOTSTRAP_FLAGS,
    harness_args,
    harness_env,
    helm_env,
    release_name,
    service_account_kubeconfig,
)

pytestmark = pytest.mark.e2e

# HAMi's device plugin's handshake annotation, which schedulers up to v2.7 set to `Deleted_...`.
HANDSHAKE = "hami.io/node-handshake"

HAMI_POD = "hami-scheduler-87f65f795-84l6d"  # HAMi's scheduler pod, as Lab 14 shows it
MIB = 12000  # each HAMi pod: a card of 15360 MiB cannot take a second one of these
NEW_MIB = 8000


def hami_release(namespace: str) -> list[Obj]:
    """What HAMi's chart (release `hami`) leaves in its namespace, under its names."""
    meta = {"namespace": namespace, "labels": {"app.kubernetes.io/instance": "hami"}}
    selector = {"matchLabels": {"app": "hami-stand-in"}}
    template = {
        "metadata": {"labels": {"app": "hami-stand-in"}},
        "spec": {"containers": [{"name": "c", "image": "projecthami/hami:v2.10.0"}]},
    }
    objects: list[Obj] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, **meta}}
        for name in ("hami-scheduler", "hami-device-plugin")
    ]
    objects += [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **meta}, "data": {}}
        for name in ("hami-scheduler", "hami-scheduler-device", "hami-device-plugin")
    ]
    objects += [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "hami-scheduler", **meta},
            "spec": {"selector": {"app": "hami-stand-in"}, "ports": [{"port": 443}]},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "hami-scheduler", **meta},
            "spec": {"replicas": 1, "selector": selector, "template": template},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "hami-device-plugin", **meta},
            "spec": {"selector": selector, "template": template},
        },
    ]
    return objects


def lease(namespace: str, holder: str) -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return json.dumps(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "hami-scheduler", "namespace": namespace},
            "spec": {
                "holderIdentity": f"{holder}_{secrets.token_hex(4)}",
                "leaseDurationSeconds": 3600,
                "acquireTime": now,
                "renewTime": now,
            },
        }
    )


def gpu_pod(name: str, mib: int, node: str | None = None) -> str:
    spec: Obj = {
        "containers": [
            {
                "name": "cuda",
                "image": "busybox",
                "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mib}},
            }
        ]
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})


class Hami:
    """HAMi's scheduler placing a pod as v2.10 does: the allocation written at filter time, the
    node lock, then the Binding; its device plugin (the node simulator) allocates and frees
    the lock."""

    def __init__(self, kube: Kube, namespace: str, user: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.act = (f"--as={user}", "--as-group=system:masters")

    def place(self, pod: str, node: str, card: str) -> dict[str, str]:
        devices = ((ContainerDevice(card, MIB, 0),),)
        now = int(dt.datetime.now(dt.UTC).timestamp())
        # bind-phase allocating
        written = allocation_annotations(node, devices, now, families=FAMILIES)
        ns = ("-n", self.namespace)
        values = [f"{k}={v}" for k, v in written.items()]
        self.kube("annotate", *self.act, "--overwrite", "pod", pod, *values, *ns)
        labels = [f"{k}={v}" for k, v in allocation_labels(node).items()]
        self.kube("label", *self.act, "--overwrite", "pod", pod, *labels, *ns)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        lock = f"{NODE_LOCK}={stamp},{self.namespace},{pod}"
        self.kube("annotate", *self.act, "--overwrite", "node", node, lock)
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod, "namespace": self.namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self.kube(
            "create", *self.act, "--raw",
            f"/api/v1/namespaces/{self.namespace}/pods/{pod}/binding", "-f", "-",
            stdin=json.dumps(binding),
        )  # fmt: skip
        return written


def allocation(kube: Kube, namespace: str, pod: str) -> str:
    return str(kube.pod(namespace, pod)["metadata"]["annotations"][DEVICES_ALLOCATED])


@pytest.fixture
def release_namespaces(kube: Kube) -> Iterator[tuple[str, str]]:
    """HAMi's release namespace and ours (hami-py's install puts it in its own)."""
    suffix = secrets.token_hex(3)
    names = (f"hami-rel-{suffix}", f"hami-py-{suffix}")
    for name in names:
        kube("create", "namespace", name)
    yield names
    for name in names:
        kube("delete", "pods", "--all", "-n", name, "--force", "--grace-period=0", check=False)
    # A held Lease named as the chart's schedulerName refuses a later plain install of the
    # chart (helm/hami/templates/hami-check.yaml).
    kube("delete", "lease", "--all", "-n", names[0], check=False)


def test_hami_to_hami_py_and_back_keeps_every_card_and_lock(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
    release_namespaces: tuple[str, str],
    tmp_path: Path,
) -> None:
    hami_ns, ours_ns = release_namespaces
    hami_user = f"system:serviceaccount:{hami_ns}:hami-scheduler"
    # The device plugin's Allocate takes a while on node a, so HAMi's last bind is still
    # allocating, its lock held, when the Lease changes hands.
    a = dataclasses.replace(t4_node(f"mig-a-{hami_ns[-6:]}"), allocate_delay=8.0)
    b = t4_node(f"mig-b-{hami_ns[-6:]}")
    nodesim(a, b)
    for obj in hami_release(hami_ns):
        kube.apply(json.dumps(obj), hami_ns)
    kube.apply(lease(hami_ns, HAMI_POD), hami_ns)
    before = {
        o["kind"]: kube.get(o["kind"].lower(), o["metadata"]["name"], hami_ns)["metadata"]["uid"]
        for o in hami_release(hami_ns)
        if o["kind"] in ("Deployment", "DaemonSet", "Service")
    }

    # 1. Our release beside HAMi's, in migration mode.
    release = release_name("hami-py")
    env = helm_env(control_plane, tmp_path)
    values = [
        f"migration.hamiNamespace={hami_ns}",
        "webhook.failurePolicy=Ignore",
        "webhook.url=https://127.0.0.1:1/webhook",
    ]
    install = ["install", release, str(CHART), "--namespace", ours_ns]
    for value in values:
        install += ["--set", value]
    install += ["--set-json", f'admissionPolicy.schedulerUsers=["{SCHEDULER_USER}"]']
    install += ["--set-json", f'admissionPolicy.devicePluginUsers=["{DEVICE_PLUGIN_USER}"]']
    helm(*install, env=env)
    ours_user = f"system:serviceaccount:{ours_ns}:{release}-scheduler"
    try:
        manifest = helm("get", "manifest", release, "-n", ours_ns, env=env).stdout
        docs = [d for d in yaml.safe_load_all(manifest) if d]
        # Nothing HAMi's chart owns: no device plugin; in HAMi's namespace only the Lease's
        # Role and RoleBinding, under our release's names.
        assert "DaemonSet" not in {d["kind"] for d in docs}
        in_hami_ns = {
            (d["kind"], d["metadata"]["name"])
            for d in docs
            if d["metadata"].get("namespace") == hami_ns
        }
        assert in_hami_ns == {
            ("Role", f"{release}-scheduler"),
            ("RoleBinding", f"{release}-scheduler"),
        }
        with control_plane.trusting(ours_user, hami_user):
            run_ours(control_plane, docs, ours_ns, release, tmp_path)
            placed = migrate(
                control_plane, kube, namespace, hami_ns, hami_user, (a.name, b.name), release
            )
            # 3. Back: HAMi's kube-scheduler holds the Lease again, ours goes.
            kube.apply(lease(hami_ns, HAMI_POD), hami_ns)
            wait_for(
                lambda: "lost leadership" in control_plane.app_log.read_text(),
                timeout=30,
                what="ours to see the Lease go back to HAMi",
            )
    finally:
        control_plane.restart_app((), {})
        helm("uninstall", release, "-n", ours_ns, env=env)
    after = {
        kind: kube.get(kind.lower(), name, hami_ns)["metadata"]["uid"]
        for kind, name in (("Deployment", "hami-scheduler"), ("DaemonSet", "hami-device-plugin"),
                           ("Service", "hami-scheduler"))
    }  # fmt: skip
    assert after == before
    assert kube.get("lease", "hami-scheduler", hami_ns)["spec"]["holderIdentity"].startswith(
        HAMI_POD + "_"
    )
    # What HAMi's scheduler reads at start: every GPU pod's node and allocation, adding up.
    for pod, written in placed.items():
        obj = kube.pod(namespace, pod)
        annotations = obj["metadata"]["annotations"]
        assert annotations[ASSIGNED_NODE] == obj["spec"]["nodeName"], pod
        assert obj["metadata"]["labels"]["hami.io/vgpu-node"] == obj["spec"]["nodeName"], pod
        assert annotations["hami.io/bind-phase"] == "success", pod
        assert decode_pod_devices(annotations[DEVICES_ALLOCATED]), pod
        if written:
            assert annotations[DEVICES_ALLOCATED] == written, pod
    assert overcommitted(kube) == []
    assert misplaced(kube, namespace) == []
    assert locks_left(kube, [a.name, b.name]) == {}


def run_ours(
    control_plane: ControlPlane, docs: list[Obj], ours_ns: str, release: str, folder: Path
) -> None:
    """`hami serve` as the release renders it, as its ServiceAccount; it follows HAMi's Lease."""
    account = f"{release}-scheduler"
    hami = container(docs, EXTENDER)
    kubeconfig = service_account_kubeconfig(control_plane, ours_ns, account, folder / "sa.kube")
    args = harness_args(hami["args"], kubeconfig, drop=BOOTSTRAP_FLAGS)
    env = harness_env(hami, f"{release}-scheduler-6b7c9-x2x4q", ours_ns)
    control_plane.restart_app(args, env)


def migrate(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    hami_ns: str,
    hami_user: str,
    nodes: tuple[str, str],
    release: str,
) -> dict[str, str]:
    """HAMi's placements, the hand-over, ours; returns each GPU pod and the allocation HAMi
    wrote for it ("" for ours)."""
    a, b = nodes
    hami = Hami(kube, namespace, hami_user)
    placed: dict[str, str] = {}
    for pod, node, card in (("hami-a0", a, f"GPU-{a}-0"), ("hami-a1", a, f"GPU-{a}-1"),
                            ("hami-b0", b, f"GPU-{b}-0")):  # fmt: skip
        kube.apply(gpu_pod(pod, MIB, node), namespace)
        placed[pod] = hami.place(pod, node, card)[DEVICES_ALLOCATED]
        kube.wait_ready(namespace, [pod], timeout=60)
    # HAMi <= v2.7 gave up node b's handshake.
    kube("annotate", *AS_PLUGIN, "--overwrite", "node", b, f"{HANDSHAKE}=Deleted_2025-08-18")
    # HAMi's last bind: allocation, lock and Binding written; the device plugin not done.
    kube.apply(gpu_pod("hami-inflight", MIB, a), namespace)
    placed["hami-inflight"] = hami.place("hami-inflight", a, f"GPU-{a}-2")[DEVICES_ALLOCATED]
    held = kube.get("node", a)["metadata"]["annotations"][NODE_LOCK]
    assert held.endswith(f",{namespace},hami-inflight")

    # 2. HAMi's kube-scheduler scaled to 0 releases the Lease; ours takes it.
    kube.apply(lease(hami_ns, f"{release}-scheduler-6b7c9-x2x4q"), hami_ns)
    wait_for(
        lambda: "became leader" in control_plane.app_log.read_text(),
        timeout=30,
        what="ours to take HAMi's Lease",
    )
    kube.apply(gpu_pod("new-0", NEW_MIB), namespace)
    kube.apply(gpu_pod("new-1", NEW_MIB), namespace)
    kube.wait_ready(namespace, ["hami-inflight", "new-0", "new-1"], timeout=120)
    for pod in ("hami-a0", "hami-a1", "hami-b0", "hami-inflight"):
        assert allocation(kube, namespace, pod) == placed[pod], pod
    # Each new pod on a card nobody held: node a's last one, or one of node b's, whose handshake
    # says `Deleted_...`. While HAMi's bind in flight holds node a's lock, a pod goes where it
    # can be bound now (a deliberate difference, docs/migrate-from-hami.md); one that goes to
    # node a waits for that lock, and never takes it over.
    free = {f"GPU-{a}-3", *(f"GPU-{b}-{i}" for i in (1, 2, 3))}
    cards = {pod: allocation(kube, namespace, pod).split(",")[0] for pod in ("new-0", "new-1")}
    assert set(cards.values()) <= free and len(set(cards.values())) == 2, cards
    log = control_plane.app_log.read_text(errors="replace")
    assert [r for r in applog.about(log, node=a) if r["msg"] == "node lock taken over"] == []
    placed["new-0"] = placed["new-1"] = ""
    assert overcommitted(kube) == []
    assert misplaced(kube, namespace) == []
    assert wait_for(lambda: not locks_left(kube, [a, b]), timeout=60, what="no lock left")
    return placed
