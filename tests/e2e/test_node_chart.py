"""The chart on the node tier's real kubelet, installed as the README says, with the images
built from the repository. The tests run in order on one release, as a user would:

1. both containers of the scheduler pods become Ready, the pods create their certificate Secret
   and patch the webhook's caBundle themselves, and kube-apiserver calls the webhook through
   its Service (kube-proxy);
2. Lab 14 Steps 4-8 with the lab's manifests on workload containers that really start (the
   leader is deleted halfway through Step 7 and the other replica places the rest); the driver
   mount and LD_LIBRARY_PATH the webhook injects and the environment the device plugin hands
   out are read from inside the running container;
3. Prometheus finds the scheduler pods through Kubernetes service discovery and their
   ``prometheus.io/*`` annotations, and PromQL returns Lab 14's allocations per card; every
   query of the Grafana dashboard returns Lab 14's cards, and the chart's alert rules evaluate
   on those series with none firing (`hami status` shows the lab's table at every step of 2);
4. a GPU pod created the moment the leader is deleted is placed by the other replica;
5. ``helm upgrade`` changing the default card policy rolls the pods, keeps every allocation,
   and places the next pod by the new default;
6. Lab 12 in standalone mode, on the same node turned into Lab 12's: GKE's own device plugin
   (GPU time-sharing), the lab's labels, and the README's Lab 12 values (GFD registration,
   libvgpuInstaller); the limit, the preload file and the library are read inside the container;
7. ``helm uninstall`` leaves only what the README says it leaves.

What a GKE node adds that this tier cannot show: a real GPU and driver (nvidia-smi's UUID and
memory inside the pod), COS's read-only root filesystem, and HAMi-core's enforcement of the
limits inside the container.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hami.engine.nvidianames import DEVICES_ALLOCATED
from tests import applog
from tests.e2e.lab12 import LAB12_UUID, apply_lab12, without_driver_plumbing
from tests.e2e.lab14 import EXAMPLES, NODE, UUIDS, replay
from tests.reference.lab14 import STEP_7
from tests.unit.monitoring.dashboard import load as load_dashboard
from tests.unit.monitoring.dashboard import queries
from tests.unit.monitoring.rules import RULES, alert_names

from .cluster import DEVICE_PLUGIN_USER
from .kube import Kube, eventually, wait_for
from .nodespec import gfd_labels, gke_t4_node
from .nodetier.chart import DEPLOYMENT, EXTENDER, LEASE, NAMESPACE, RELEASE, Release
from .nodetier.cluster import GKE_VGPU_DIR, NodeCluster
from .nodetier.dashboard import Lab, check_every_query
from .prometheus import Prometheus, find_tools
from .status import check_status, hami_status

pytestmark = [pytest.mark.node, pytest.mark.e2e]  # the built binaries, a real kubelet

LAB = "lab14"
LAB12_NS = "lab12"
HANDOVER = "during-handover"
LAB12_PODS = ("kai-hami-lab12-a", "kai-hami-lab12-b")


NEXT_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: after-upgrade}
spec:
  restartPolicy: Never
  containers:
    - name: cuda
      image: nvidia/cuda:12.4.1-base-ubuntu22.04
      command: ["sleep", "infinity"]
      resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}
"""


@pytest.fixture(scope="module")
def chart(node_tier: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """`helm install` as the README's GKE section, with the locally built image."""
    release = Release(node_tier, tmp_path_factory.mktemp("helm"))
    release.install(
        *("--set", "preset=gke", "--set", "image.repository=localhost/hami-py"),
        *("--set", "scheduler.replicas=2"),
        # The fake device plugin stands in for HAMi's (whose image is not built here).
        *("--set", "devicePlugin.enabled=false"),
        "--set-json",
        f'admissionPolicy.devicePluginUsers=["{DEVICE_PLUGIN_USER}"]',
    )
    try:
        yield release
    finally:
        if release.installed():  # the last test uninstalls it; a failure before may not have
            release.uninstall()


def scrape_job(kubeconfig: Path) -> dict[str, object]:
    """The conventional prometheus.io/* job: nothing in it names our pods or port."""
    return {
        "job_name": "kubernetes-pods",
        "kubernetes_sd_configs": [{"role": "pod", "kubeconfig_file": str(kubeconfig)}],
        "relabel_configs": [
            {
                "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
                "action": "keep",
                "regex": "true",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scheme"],
                "regex": "(https?)",
                "target_label": "__scheme__",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_path"],
                "regex": "(.+)",
                "target_label": "__metrics_path__",
            },
            {
                "source_labels": [
                    "__address__",
                    "__meta_kubernetes_pod_annotation_prometheus_io_port",
                ],
                "regex": r"([^:]+)(?::\d+)?;(\d+)",
                "replacement": "$1:$2",
                "target_label": "__address__",
            },
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "kubernetes_pod"},
        ],
    }


@pytest.fixture(scope="module")
def prometheus(
    node_tier: NodeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    """Prometheus finding the scheduler pods through Kubernetes service discovery, with the
    chart's alert rules; started before Lab 14 so that the dashboard's rates and latencies
    cover the lab's reviews, filters and binds."""
    plane = node_tier.plane
    server = Prometheus(
        find_tools(plane.bin_dir),
        [scrape_job(plane.kubeconfig)],
        plane.run_dir,
        tmp_path_factory.mktemp("prometheus"),
        plane.env,
        rule_files=(RULES,),
    )
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def new_namespace(kube: Kube, name: str) -> None:
    """Create a namespace pods can be created in (its default ServiceAccount exists)."""
    kube("create", "namespace", name)
    wait_for(
        lambda: kube("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
        timeout=60,
        what="kube-controller-manager to create the namespace's default ServiceAccount",
    )


def allocations(kube: Kube, ns: str) -> dict[str, str]:
    pods = json.loads(kube("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
    return {p["metadata"]["name"]: p["metadata"]["annotations"][DEVICES_ALLOCATED] for p in pods}


def step_7_shares() -> dict[str, float]:
    """How many of Step 7's pods share each card of the lab's node."""
    cards = Counter(line.split()[1].split(",")[0] for line in STEP_7.splitlines())
    return {uuid: float(cards[uuid]) for uuid in UUIDS}


def test_scheduler_pods_run_and_bootstrap_their_certificate(chart: Release) -> None:
    kube = chart.kube
    pods = chart.scheduler_pods()
    assert len(pods) == 2
    for pod in pods:
        statuses = {c["name"]: c["ready"] for c in pod["status"]["containerStatuses"]}
        assert statuses == {"kube-scheduler": True, EXTENDER: True}, statuses
    secret = kube.get("secret", f"{DEPLOYMENT}-tls", NAMESPACE)
    ca = base64.b64decode(secret["data"]["ca.crt"])
    webhook = kube.get("mutatingwebhookconfiguration", f"{RELEASE}-webhook")["webhooks"][0]
    assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == ca
    assert webhook["clientConfig"]["service"]["name"] == DEPLOYMENT
    # kube-apiserver reaches the webhook through that Service (kube-proxy's rules): a GPU pod
    # comes back mutated.
    gpu_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": "default"},
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]
        },
    }
    created = kube("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(gpu_pod))
    assert json.loads(created.stdout)["spec"]["schedulerName"] == "hami-scheduler"


def bound_node(kube: Kube, ns: str, name: str) -> str:
    """The node the pod is bound to, once it is."""
    node: str = wait_for(
        lambda: kube.pod(ns, name)["spec"].get("nodeName"), timeout=120, what=f"{name} bound"
    )
    return node


def test_lab14_steps_4_to_8_on_a_real_node(chart: Release, prometheus: Prometheus) -> None:
    """`prometheus` is started here, to scrape the lab from its first pod."""
    kube = chart.kube
    new_namespace(kube, LAB)

    def apply(kube: Kube, ns: str, name: str) -> None:
        # Without the driver plumbing written by hand: the webhook's gke profile adds it.
        text = without_driver_plumbing(EXAMPLES / name)
        if name != "06-composed-pods.yaml":
            kube("apply", "-n", ns, "-f", "-", stdin=text)
            return
        # Step 7's two pods come right after the hand-over, and the lab's placements depend on
        # their order. Once in four CI runs both waited 7 s and the second was placed first
        # (the cause is not established: the scheduler pods' logs were not kept), so here each
        # is created once the one before it is bound.
        for pod in yaml.safe_load_all(text):
            kube("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump(pod))
            bound_node(kube, ns, str(pod["metadata"]["name"]))

    # Halfway through Step 7 the leader goes: the other replica places the rest. (Step 7's two
    # pods are created after the hand-over, as the lab's placements depend on their order.)
    # At every table the lab prints, `hami status` shows the same (tests/e2e/status.py).
    replay(
        kube,
        LAB,
        apply,
        chart.hand_over,
        chart.scheduler_logs,
        lambda table, pending: check_status(kube, LAB, table, pending),
    )

    card, _, memory, cores = allocations(kube, LAB)["policy-binpack-solo"].split(":")[0].split(",")
    inside = kube(
        "exec",
        "-n",
        LAB,
        "policy-binpack-solo",
        "--",
        "sh",
        "-c",
        "env; echo ---; cat /proc/mounts; echo ---; cat /etc/ld.so.preload",
    ).stdout
    env_text, mounts, preload = inside.split("---\n")
    env = dict(line.split("=", 1) for line in env_text.splitlines() if "=" in line)
    # Written by our webhook (driver profile gke): the driver's lib64, mounted and on the path.
    assert env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert any(line.split()[1] == "/usr/local/nvidia/lib64" for line in mounts.splitlines())
    # Handed out by the stand-in device plugin at Allocate (tests/e2e/fake_device_plugin.py),
    # from hami.io/vgpu-devices-to-allocate, which our Binding wrote: the card and slice our
    # scheduler chose reach the container. /etc/ld.so.preload is the stand-in's file.
    assert (env["NVIDIA_VISIBLE_DEVICES"], env["CUDA_DEVICE_MEMORY_LIMIT_0"]) == (
        card,
        f"{memory}m",
    )
    assert env["CUDA_DEVICE_SM_LIMIT"] == cores
    assert preload.strip() == "/usr/local/vgpu/libvgpu.so"


def test_prometheus_discovers_the_pods_and_sees_lab14s_allocations(
    chart: Release, prometheus: Prometheus
) -> None:
    pods = {p["metadata"]["name"] for p in chart.scheduler_pods()}
    assert len(pods) == 2

    def lab_allocations_scraped() -> None:
        up = prometheus.by("kubernetes_pod", 'up{job="kubernetes-pods"}')
        assert up == dict.fromkeys(pods, 1.0), up
        for pod in pods:  # both replicas follow the pods, the leader and the other
            query = f'hami_gpu_shared_count{{kubernetes_pod="{pod}",node="{NODE}"}}'
            assert prometheus.by("device_uuid", query) == step_7_shares()

    eventually(lab_allocations_scraped, timeout=60)
    memory = f'max by (pod) (hami_vgpu_memory_allocated_bytes{{namespace="{LAB}"}})'
    assert prometheus.by("pod", memory) == dict.fromkeys(allocations(chart.kube, LAB), 1000 * 2**20)


def test_every_dashboard_query_returns_lab14s_cards_and_no_alert_fires(
    chart: Release, node_tier: NodeCluster, prometheus: Prometheus
) -> None:
    """Every panel of helm/hami/monitoring/hami-dashboard.json, as Grafana would send it, against
    the Prometheus that scraped the lab (expectations: tests/e2e/nodetier/dashboard.py)."""
    up = prometheus.by("instance", 'up{job="kubernetes-pods"} == 1')
    lab = Lab(node_tier.spec, LAB, frozenset(up))
    assert len(lab.instances) == 2
    # The node and namespace variables list what Grafana's label_values() would offer.
    assert prometheus.label_values("node", "hami_gpu_memory_limit_bytes") == [NODE]
    assert prometheus.label_values("namespace", "hami_vgpu_memory_allocated_bytes") == [LAB]
    check_every_query(prometheus, lab, queries(load_dashboard()))
    # The alert rules run on the same live series: every one evaluates without error, and in
    # this healthy cluster none fires.
    rules = prometheus.rules()
    assert {r["name"] for r in rules} == alert_names()
    for rule in rules:
        assert (rule["health"], rule.get("lastError", "")) == ("ok", ""), rule
        assert rule["lastEvaluation"] > "2000", rule  # evaluated, not just loaded
        assert [a for a in rule["alerts"] if a["state"] == "firing"] == [], rule
    # What a user sees in a terminal at this point (README's Monitoring section).
    (node_tier.plane.run_dir / "hami-status.txt").write_text(hami_status(chart.kube))


def test_a_gpu_pod_created_while_the_leader_is_gone_is_placed(chart: Release) -> None:
    kube = chart.kube
    new_namespace(kube, HANDOVER)
    gone = chart.delete_leader()
    kube("apply", "-n", HANDOVER, "-f", "-", stdin=NEXT_POD.replace("after-upgrade", HANDOVER))
    kube.wait_ready(HANDOVER, [HANDOVER], timeout=120)
    leader = chart.leader()
    assert leader not in (gone, None)
    card = allocations(kube, HANDOVER)[HANDOVER].split(",")[0]
    assert card in UUIDS
    # Which replica placed it: the new leader's kube-scheduler (its Scheduled Event names the
    # pod it runs in) and the hami serve beside it (it logged the bind), nobody else.
    (scheduled,) = [e for e in kube.pod_events(HANDOVER, HANDOVER) if e["reason"] == "Scheduled"]
    assert scheduled["reportingInstance"] == f"hami-scheduler-{leader}", scheduled
    for pod in chart.scheduler_pods():
        name = pod["metadata"]["name"]
        bound = applog.about(chart.extender_log(name), pod=HANDOVER, msg="pod bound")
        assert len(bound) == (1 if name == leader else 0), (name, bound)
    # Gone again, so that the cards are as Step 7 left them for the tests after this one.
    kube("delete", "namespace", HANDOVER, "--wait", "--timeout=2m", timeout=130)


def test_helm_upgrade_changes_the_default_policy_and_keeps_every_allocation(
    chart: Release,
) -> None:
    kube = chart.kube
    before = allocations(kube, LAB)
    old = {p["metadata"]["name"] for p in chart.scheduler_pods()}
    chart.upgrade("--set", "scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy=binpack")
    new = chart.scheduler_pods()
    assert len(new) == 2 and not old & {p["metadata"]["name"] for p in new}, old
    assert allocations(kube, LAB) == before
    for pod in new:  # each new replica rebuilt the card usage from the pods' annotations

        def same_usage(pod: dict[str, object] = pod) -> None:
            assert chart.shared_counts(pod) == step_7_shares()

        eventually(same_usage, timeout=30)

    # A pod naming no policy now stacks onto the busiest card, where spread, the default
    # before the upgrade, would have taken the idle one.
    kube("apply", "-n", LAB, "-f", "-", stdin=NEXT_POD)
    kube.wait_ready(LAB, ["after-upgrade"], timeout=120)
    busiest = max(step_7_shares().items(), key=lambda item: item[1])[0]
    assert allocations(kube, LAB)["after-upgrade"] == f"{busiest},NVIDIA,1000,0:;"


def test_lab12_standalone_on_a_node_without_hamis_device_plugin(
    chart: Release, node_tier: NodeCluster
) -> None:
    kube = chart.kube
    kube("delete", "namespace", LAB, "--wait", "--timeout=3m", timeout=190)  # an idle node
    # The node becomes Lab 12's: HAMi's plugin goes, GKE's own advertises its one T4 to two
    # clients (GPU time-sharing), and the node gets the lab's labels (Lab 12 Steps 2 and 6).
    spec = gke_t4_node(node_tier.spec.name, [LAB12_UUID], shared_clients=2)
    node_tier.replace_device_plugin(spec)
    labels = {**gfd_labels(spec.cards), "hami.run/lab-12": "true"}
    kube("label", "node", spec.name, *(f"{k}={v}" for k, v in labels.items()), "--overwrite")
    # The README's Lab 12 values, onto the running release.
    chart.upgrade(
        *("--set", "webhook.injection.mode=standalone"),
        *("--set", "gfdRegistration.enabled=true", "--set", "gfdRegistration.splitCount=2"),
        *("--set", "libvgpuInstaller.enabled=true"),
        *("--set", "libvgpuInstaller.image=projecthami/hami:v2.10.0"),
    )
    installer = f"daemonset/{RELEASE}-libvgpu-installer"
    kube("-n", NAMESPACE, "rollout", "status", installer, "--timeout=120s", timeout=130)

    new_namespace(kube, LAB12_NS)
    apply_lab12(kube, LAB12_NS)  # KAI's form: gpu-memory, kai-scheduler
    kube.wait_ready(LAB12_NS, list(LAB12_PODS), timeout=180)
    library = (GKE_VGPU_DIR / "libvgpu.so").read_text()  # libvgpuInstaller's copy
    assert "placeholder" in library
    for name in LAB12_PODS:
        pod = kube.pod(LAB12_NS, name)
        assert pod["spec"]["nodeName"] == spec.name
        assert (
            pod["metadata"]["annotations"][DEVICES_ALLOCATED]
            == f"GFD-{spec.name}-0,NVIDIA,4096,0:;"
        )
        # The lab's start-up log; nvidia-smi's line after it needs a real GPU.
        log = kube("logs", "-n", LAB12_NS, name).stdout
        assert [line for line in log.splitlines() if "limit" in line] == ["limit=4096m"], log
        inside = kube(
            *("exec", "-n", LAB12_NS, name, "--", "sh", "-c"),
            "env; echo ---; cat /etc/ld.so.preload; echo ---; cat /usr/local/vgpu/libvgpu.so",
        ).stdout
        env_text, preload, inside_library = inside.split("---\n")
        env = dict(line.split("=", 1) for line in env_text.splitlines() if "=" in line)
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
        assert env["NVIDIA_VISIBLE_DEVICES"] == "0"  # the card's index: no one here knows its UUID
        assert env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
        assert preload == "/usr/local/vgpu/libvgpu.so\n"
        assert inside_library == library


def test_helm_uninstall_leaves_only_what_the_readme_says(
    chart: Release, node_tier: NodeCluster
) -> None:
    kube = chart.kube
    chart.uninstall()
    listable = kube("api-resources", "--verbs=list", "-o", "name").stdout.split()
    kinds = ",".join(k for k in listable if not k.startswith("events"))
    labelled = kube("get", kinds, "-A", "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "name")
    assert labelled.stdout.split() == []
    namespaced = kube("api-resources", "--verbs=list", "--namespaced", "-o", "name").stdout
    in_namespace = ",".join(k for k in namespaced.split() if not k.startswith("events"))

    def left() -> set[str]:
        return set(kube("get", in_namespace, "-n", NAMESPACE, "-o", "name").stdout.split())

    # What every namespace has, and the two objects the README's removal section deletes ...
    defaults = {"configmap/kube-root-ca.crt", "serviceaccount/default"}
    made_by_the_pods = {f"secret/{DEPLOYMENT}-tls", f"lease.coordination.k8s.io/{LEASE}"}
    assert left() == defaults | made_by_the_pods
    # ... with its command, after which the namespace is as any other.
    kube("-n", NAMESPACE, "delete", f"secret/{DEPLOYMENT}-tls", f"lease/{LEASE}")
    assert left() == defaults
    node = kube.get("node", node_tier.spec.name)
    assert not [a for a in node["metadata"].get("annotations", {}) if a.startswith("hami.io/")]
    # The GPU pods keep running, and keep their library on the node.
    kube.wait_ready(LAB12_NS, list(LAB12_PODS), timeout=10)
    assert (GKE_VGPU_DIR / "libvgpu.so").exists()
