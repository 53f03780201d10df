"""The Helm chart (helm/hami) as rendered by the real helm binary, checked object by object.

Needs helm: $HAMI_HELM, else the one tests/e2e/k8sbins/build.sh builds (with Go on PATH or
$HAMI_E2E_BIN_DIR), else helm on PATH; without any, these tests are skipped. The rendering and
the lookups in what it rendered are tests/builders/chart.py.
tests/e2e/test_helm.py installs the chart into a real API server and runs what it renders.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from hami.engine.families.registry import GATED, Families, from_device_config, gated_members
from hami.engine.policy import GPU_POLICY_NAMES
from hami.runtime.config import Settings, bind_budget, body_budget_mib
from hami.service.bindrules import go_duration
from tests.builders.chart import (
    API_VERSIONS,
    CHART,
    EXTENDER,
    KUBE_VERSION,
    LAB12,
    NAMESPACE,
    Obj,
    container,
    env_of,
    find,
    helm,
    kinds,
    lab14_step3_manifest,
    render,
    rules,
    scheduler_config,
    served_families,
    settings_from,
    template_args,
)

# The other families' resources the chart lists by default: Ascend's and Iluvatar's only where
# devices.<family>.enabled, as HAMi's chart.
DEFAULT_FAMILY_RESOURCES = from_device_config({}, ()).other_resource_names()

GPU_RESOURCES = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
)
GKE_NVIDIA = "/home/kubernetes/bin/nvidia"


# helm (or promtool) is one of the binaries tests/e2e/k8sbins builds: the e2e tier's, so the
# fast tier never starts the Go build (tests/e2e/README.md).
pytestmark = pytest.mark.e2e


# --- lint ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["preset=gke"],
        ["preset=gke", "devicePlugin.monitor.enabled=true"],
        [
            "devicePlugin.enabled=true",
            "certs.certManager.enabled=true",
            "webhook.injection.mode=standalone",
        ],
        [
            "scheduler.replicas=1",
            "scheduler.leaderElect=false",
            "metrics.serviceMonitor.enabled=true",
        ],
        [
            "metrics.serviceMonitor.enabled=true",
            "metrics.prometheusRule.enabled=true",
            "metrics.grafanaDashboard.enabled=true",
        ],
        [
            "preset=gke",
            "devicePlugin.enabled=false",
            "webhook.injection.mode=standalone",
            "gfdRegistration.enabled=true",
            "libvgpuInstaller.enabled=true",
            "libvgpuInstaller.image=projecthami/hami:v2.10.0",
        ],
    ],
    ids=[
        "default",
        "gke",
        "gke-monitor",
        "certmanager-standalone-plugin",
        "single",
        "monitoring",
        "lab12",
    ],
)
def test_helm_lint_passes(values: list[str]) -> None:
    args = [
        "lint",
        "--strict",
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        KUBE_VERSION,
    ]
    for value in values:
        args += ["--set", value]
    result = helm(*args)
    assert "0 chart(s) failed" in result.stdout


# --- the default rendering -----------------------------------------------------------------------


def test_helm_default_renders_the_scheduler_and_nothing_node_side() -> None:
    docs = render()
    assert kinds(docs) == {
        ("ServiceAccount", "hami-py-scheduler"),
        ("ClusterRole", "hami-py-scheduler"),
        ("ClusterRoleBinding", "hami-py-scheduler"),
        ("ClusterRoleBinding", "hami-py-scheduler-kube-scheduler"),
        ("ClusterRoleBinding", "hami-py-scheduler-volume-scheduler"),
        ("Role", "hami-py-scheduler"),
        ("RoleBinding", "hami-py-scheduler"),
        ("RoleBinding", "hami-py-scheduler-auth-reader"),
        ("ConfigMap", "hami-py-scheduler"),
        ("Service", "hami-py-scheduler"),
        ("Deployment", "hami-py-scheduler"),
        ("MutatingWebhookConfiguration", "hami-py-webhook"),
        ("ValidatingAdmissionPolicy", "hami-py-scheduling-state"),
        ("ValidatingAdmissionPolicyBinding", "hami-py-scheduling-state"),
    }
    cluster_scoped = (
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    )
    for doc in docs:
        if doc["kind"] not in cluster_scoped:
            expected = (
                "kube-system" if doc["metadata"]["name"].endswith("auth-reader") else NAMESPACE
            )
            assert doc["metadata"]["namespace"] == expected, doc["metadata"]


@pytest.mark.parametrize(
    ("values", "threshold"),
    [
        ((), 60),  # 30 s + 6 s for each of 15 times 10,000 pods: 120 s at a 2 s period
        (("scheduler.startup.expectedPods=300001",), 108),  # 31 started ten-thousands: 216 s
        (("scheduler.startup.expectedPods=0", "scheduler.startup.baseSeconds=9"), 5),
    ],
)
def test_helm_startup_budget_follows_the_pods_expected(
    values: tuple[str, ...], threshold: int
) -> None:
    """hami serve's startupProbe waits for /readyz (its cache complete) for baseSeconds plus
    secondsPer10kPods per 10,000 expected pods (docs/development.md)."""
    probe = container(render(*values), EXTENDER)["startupProbe"]
    assert probe["httpGet"]["path"] == "/readyz"
    assert (probe["periodSeconds"], probe["failureThreshold"]) == (2, threshold)


def test_helm_webhook_is_scoped_to_gpu_pods_outside_system_namespaces() -> None:
    configuration = find(render(), "MutatingWebhookConfiguration", "hami-py-webhook")
    assert "annotations" not in configuration["metadata"]
    (webhook,) = configuration["webhooks"]
    assert webhook["name"] == "vgpu.hami-py.io"
    assert webhook["admissionReviewVersions"] == ["v1", "v1beta1"]
    assert webhook["clientConfig"] == {
        "service": {
            "name": "hami-py-scheduler",
            "namespace": NAMESPACE,
            "path": "/webhook",
            "port": 443,
        }
    }, "caBundle is left to the certificate bootstrap"
    assert webhook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        },
        # kubectl debug's ephemeral containers, checked like the pod's own (hami.engine.escapes)
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["UPDATE"],
            "resources": ["pods/ephemeralcontainers"],
            "scope": "Namespaced",
        },
        # Updates, judged as at creation (hami.engine.admission.admit_update)
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["UPDATE"],
            "resources": ["pods", "pods/status"],
            "scope": "Namespaced",
        },
    ]
    assert webhook["failurePolicy"] == "Fail"
    assert webhook["sideEffects"] == "None"
    assert webhook["timeoutSeconds"] == 10
    assert webhook["reinvocationPolicy"] == "Never"
    assert webhook["matchPolicy"] == "Equivalent"
    assert webhook["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]},
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["kube-system", NAMESPACE],
            },
        ]
    }
    # A pod's own ignore label spares it the mutation, not the checks: the webhook must see it.
    assert "objectSelector" not in webhook
    condition, updates = webhook["matchConditions"]
    # Of the updates, those that add or change an annotation outside hami.io/ (the API server
    # evaluates it in tests/e2e/test_updates.py).
    assert updates["name"] == "updates-that-change-annotations"
    assert "!k.startsWith('hami.io/')" in updates["expression"]
    expression = condition["expression"]
    # Both container lists, limits and requests, every GPU resource (the API server evaluates it
    # in tests/e2e/test_helm.py).
    assert "object.spec.containers.exists(c," in expression
    assert "has(object.spec.initContainers) && object.spec.initContainers.exists(c," in expression
    assert expression.count("c.resources.limits.exists(") == 2
    assert expression.count("c.resources.requests.exists(") == 2
    for resource in (*GPU_RESOURCES, *DEFAULT_FAMILY_RESOURCES):
        assert expression.count(f"'{resource}'") == 4, resource
    assert "huawei.com/" not in expression and "iluvatar.ai/" not in expression
    # KAI's form asks for no resource: the webhook translates it (hami/engine/kai.py).
    assert "object.spec.schedulerName == 'kai-scheduler'" in expression
    for key in ("gpu-memory", "gpu-fraction"):
        assert f"'{key}' in object.metadata.annotations" in expression, key
    assert "priority" not in expression


def test_helm_overwrite_env_reaches_hami_serve_and_the_device_config() -> None:
    """On by default (docs/trust-boundary.md); one value for both, as in HAMi's chart."""
    for value, flag in ((None, "true"), ("false", "false")):
        docs = render(
            "devicePlugin.enabled=true", *([f"webhook.overwriteEnv={value}"] if value else [])
        )
        assert f"--overwrite-env={flag}" in container(docs, EXTENDER)["args"]
        config = yaml.safe_load(
            find(docs, "ConfigMap", "hami-py-device-plugin-device")["data"]["device-config.yaml"]
        )
        assert config["nvidia"]["overwriteEnv"] is (flag == "true")


def test_helm_dra_gpu_device_classes_reach_hami_serve_only_where_given() -> None:
    """hami serve's own list (hami.engine.claims) unless the value names others."""
    assert not any(a.startswith("--dra-gpu") for a in container(render(), EXTENDER)["args"])
    docs = render('webhook.draGpuDeviceClasses=["gpu.nvidia.com","gpu.example.com"]')
    assert (
        "--dra-gpu-device-classes=gpu.nvidia.com,gpu.example.com"
        in (container(docs, EXTENDER)["args"])
    )


def test_helm_webhook_settings_follow_values() -> None:
    docs = render(
        "webhook.failurePolicy=Ignore",
        "webhook.timeoutSeconds=5",
        'webhook.excludeNamespaces=["batch","kube-system"]',
        'webhook.objectSelector.matchExpressions=[{"key":"team","operator":"In","values":["ml"]}]',
        namespace="kube-system",
    )
    (webhook,) = find(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["timeoutSeconds"] == 5
    names = webhook["namespaceSelector"]["matchExpressions"][1]
    assert names["values"] == ["kube-system", "batch"], "deduplicated, release namespace included"
    assert webhook["objectSelector"]["matchExpressions"][0] == {
        "key": "team",
        "operator": "In",
        "values": ["ml"],
    }


def test_helm_rbac_grants_exactly_what_the_process_uses() -> None:
    docs = render()
    assert rules(find(docs, "ClusterRole", "hami-py-scheduler")) == [
        ("", "pods", (), ("get", "list", "watch", "patch")),
        ("", "pods/binding", (), ("create",)),
        ("", "nodes", (), ("get", "list", "watch", "patch")),
        ("", "events", (), ("create", "patch")),
        ("", "resourcequotas", (), ("list", "watch")),
        (
            "admissionregistration.k8s.io",
            "validatingadmissionpolicybindings",
            ("hami-py-scheduling-state",),
            ("get",),
        ),
        ("resource.k8s.io", "resourceclaims", (), ("get",)),
        ("resource.k8s.io", "resourceclaimtemplates", (), ("get",)),
        # The DRA bookkeeping's informers (scheduler.draBookkeeping, on by default).
        ("resource.k8s.io", "resourceclaims", (), ("list", "watch")),
        ("resource.k8s.io", "resourceslices", (), ("list", "watch")),
        ("resource.k8s.io", "deviceclasses", (), ("list", "watch")),
        (
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            ("hami-py-webhook",),
            ("get", "patch"),
        ),
    ]
    assert rules(find(docs, "Role", "hami-py-scheduler")) == [
        ("coordination.k8s.io", "leases", (), ("get", "list", "watch", "create")),
        ("coordination.k8s.io", "leases", ("hami-scheduler",), ("update",)),
        ("", "secrets", (), ("create",)),
        ("", "secrets", ("hami-py-scheduler-tls",), ("get", "update")),
    ]
    # The kube-scheduler container gets Kubernetes' own roles for a scheduler, nothing broader.
    bound = {
        (d["kind"], d["roleRef"]["name"])
        for d in docs
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
    }
    assert bound == {
        ("ClusterRoleBinding", "hami-py-scheduler"),
        ("ClusterRoleBinding", "system:kube-scheduler"),
        ("ClusterRoleBinding", "system:volume-scheduler"),
        ("RoleBinding", "hami-py-scheduler"),
        ("RoleBinding", "extension-apiserver-authentication-reader"),
    }
    for d in docs:
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            assert d["subjects"] == [
                {"kind": "ServiceAccount", "name": "hami-py-scheduler", "namespace": NAMESPACE}
            ]


def test_helm_rbac_follows_the_certificate_and_injection_modes() -> None:
    docs = render("certs.certManager.enabled=true", "webhook.injection.mode=standalone")
    assert rules(find(docs, "ClusterRole", "hami-py-scheduler")) == [
        ("", "pods", (), ("get", "list", "watch", "patch")),
        ("", "pods/binding", (), ("create",)),
        ("", "nodes", (), ("get", "list", "watch", "patch")),
        ("", "events", (), ("create", "patch")),
        ("", "resourcequotas", (), ("list", "watch")),
        (
            "admissionregistration.k8s.io",
            "validatingadmissionpolicybindings",
            ("hami-py-scheduling-state",),
            ("get",),
        ),
        ("resource.k8s.io", "resourceclaims", (), ("get",)),
        ("resource.k8s.io", "resourceclaimtemplates", (), ("get",)),
        ("resource.k8s.io", "resourceclaims", (), ("list", "watch")),
        ("resource.k8s.io", "resourceslices", (), ("list", "watch")),
        ("resource.k8s.io", "deviceclasses", (), ("list", "watch")),
        ("", "configmaps", (), ("create", "get", "patch", "update")),
    ]
    assert [r[1] for r in rules(find(docs, "Role", "hami-py-scheduler"))] == ["leases", "leases"]


def test_helm_dra_bookkeeping_auto_follows_what_the_cluster_serves() -> None:
    """The default (auto) counts DRA claims where the cluster serves resource.k8s.io/v1 and
    leaves them alone on an older one, where the informers could never list; an explicit
    value wins either way."""

    def flag(*values: str, api_versions: tuple[str, ...] = API_VERSIONS) -> str:
        args = template_args(*values, kube_version="1.33.0", api_versions=api_versions)
        docs = [d for d in yaml.safe_load_all(helm(*args).stdout) if d]
        (arg,) = [
            a
            for a in container(docs, "vgpu-scheduler-extender")["args"]
            if "--dra-bookkeeping" in a
        ]
        return str(arg)

    assert flag() == "--dra-bookkeeping=true"
    assert flag(api_versions=()) == "--dra-bookkeeping=false"
    assert flag("scheduler.draBookkeeping=true", api_versions=()) == "--dra-bookkeeping=true"
    assert flag("scheduler.draBookkeeping=false") == "--dra-bookkeeping=false"


def test_helm_dra_bookkeeping_off_lists_no_dra_objects() -> None:
    """On a cluster that serves no resource.k8s.io/v1 the informers are off, and so are their
    rules (the webhook still reads a GPU pod's claims, where it can)."""
    docs = render("scheduler.draBookkeeping=false")
    listed = [
        r
        for r in rules(find(docs, "ClusterRole", "hami-py-scheduler"))
        if r[0] == "resource.k8s.io"
    ]
    assert listed == [
        ("resource.k8s.io", "resourceclaims", (), ("get",)),
        ("resource.k8s.io", "resourceclaimtemplates", (), ("get",)),
    ]
    assert "--dra-bookkeeping=false" in container(docs, EXTENDER)["args"]


def test_helm_preemption_adds_the_eviction_status_and_budget_rules() -> None:
    docs = render("scheduler.preemption.enabled=true", "scheduler.preemption.holdSeconds=90")
    assert rules(find(docs, "ClusterRole", "hami-py-scheduler"))[11:14] == [
        ("", "pods/eviction", (), ("create",)),
        ("", "pods/status", (), ("patch",)),
        ("policy", "poddisruptionbudgets", (), ("list",)),
    ]
    settings = settings_from(container(docs, EXTENDER))
    assert (settings.preemption, settings.preemption_hold_seconds) == (True, 90.0)


def test_helm_scheduler_config_runs_the_profile_with_our_extender() -> None:
    config = scheduler_config(render())
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["leaderElection"] == {
        "leaderElect": True,
        "resourceLock": "leases",
        "resourceName": "hami-scheduler",
        "resourceNamespace": NAMESPACE,
    }
    assert config["profiles"] == [{"schedulerName": "hami-scheduler"}]
    assert config["clientConnection"] == {"qps": 100, "burst": 200}
    assert config["extenders"] == [
        {
            "urlPrefix": "http://127.0.0.1:9444",
            "filterVerb": "filter",
            "bindVerb": "bind",
            "enableHTTPS": False,
            "nodeCacheCapable": True,
            "weight": 1,
            "httpTimeout": "30s",
            "ignorable": False,
            "managedResources": [
                {"name": name, "ignoredByScheduler": True}
                for name in (
                    *GPU_RESOURCES,
                    "nvidia.com/priority",
                    *DEFAULT_FAMILY_RESOURCES,
                )
            ],
        }
    ]


@pytest.mark.parametrize(("timeout", "total"), [("30s", 27.0), ("1m", 55.0), ("10s", 9.0)])
def test_helm_binds_end_within_the_extender_timeout_kube_scheduler_is_given(
    timeout: str, total: float
) -> None:
    # One value, written once: kube-scheduler waits httpTimeout for /bind, and hami serve's
    # bind budget (lock wait included) is cut from the very same value.
    docs = render(f"scheduler.kubeScheduler.httpTimeout={timeout}")
    assert scheduler_config(docs)["extenders"][0]["httpTimeout"] == timeout
    budget = bind_budget(settings_from(container(docs, EXTENDER)))
    assert budget.total == total
    assert budget.total < go_duration(timeout).total_seconds()


def test_helm_one_replica_may_run_without_leader_election() -> None:
    docs = render("scheduler.replicas=1", "scheduler.leaderElect=false")
    assert scheduler_config(docs)["leaderElection"] == {"leaderElect": False}
    deployment = find(docs, "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert ("PodDisruptionBudget", "hami-py-scheduler") not in kinds(docs)
    args = container(docs, EXTENDER)["args"]
    assert "--leader-elect=false" in args
    assert not [a for a in args if a.startswith("--leader-elect-resource")]


def test_helm_two_replicas_without_leader_election_are_refused() -> None:
    result = helm(
        *template_args("scheduler.replicas=2", "scheduler.leaderElect=false"), check=False
    )
    assert result.returncode != 0
    assert "scheduler.replicas=2 needs scheduler.leaderElect=true" in result.stderr


def test_helm_without_the_admission_policy_the_risk_must_be_accepted() -> None:
    result = helm(*template_args("admissionPolicy.enabled=false"), check=False)
    assert result.returncode != 0
    assert "needs admissionPolicy.allowSchedulerWithout=true" in result.stderr
    accepted = render("admissionPolicy.enabled=false", "admissionPolicy.allowSchedulerWithout=true")
    assert "--allow-without-admission-policy=true" in container(accepted, EXTENDER)["args"]


@pytest.mark.parametrize(
    ("kube_version", "tag"),
    [("1.36.3", "v1.36.3"), ("v1.35.7-gke.1150000", "v1.35.7"), ("1.31.4-eks-2d5f260", "v1.31.4")],
)
def test_helm_kube_scheduler_image_matches_the_cluster(kube_version: str, tag: str) -> None:
    docs = render(kube_version=kube_version)
    assert container(docs, "kube-scheduler")["image"] == f"registry.k8s.io/kube-scheduler:{tag}"
    docs = render("scheduler.kubeScheduler.image.tag=v1.34.2", kube_version=kube_version)
    assert container(docs, "kube-scheduler")["image"] == "registry.k8s.io/kube-scheduler:v1.34.2"


def test_helm_deployment_runs_both_containers_locked_down() -> None:
    docs = render()
    deployment = find(docs, "Deployment")
    spec = deployment["spec"]
    pod = spec["template"]
    assert spec["replicas"] == 1  # as HAMi's chart
    assert "hami.io/webhook" not in pod["metadata"]["labels"], "its namespace is excluded"
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "9395"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["serviceAccountName"] == "hami-py-scheduler"
    for c in pod["spec"]["containers"]:
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True, c["name"]
        assert sc["allowPrivilegeEscalation"] is False, c["name"]
        assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]
        assert c["resources"]["requests"] and c["resources"]["limits"], c["name"]

    hami = container(docs, EXTENDER)
    assert hami["image"] == "hami-py:0.1.0", "the tag defaults to the chart's appVersion"
    assert "command" not in hami, "the image's ENTRYPOINT is `hami serve`"
    assert hami["args"] == [
        "--bind-address=0.0.0.0",
        "--port=9443",
        "--extender-bind-address=127.0.0.1",
        "--extender-port=9444",
        "--metrics-bind-address=$(POD_IP)",
        "--metrics-port=9395",
        "--max-connections=1024",
        "--metrics-tls=false",
        "--metrics-pod-labels=true",
        "--scheduler-name=hami-scheduler",
        "--gpu-scheduler-policy=spread",
        "--node-scheduler-policy=binpack",
        "--force-overwrite-default-scheduler=true",
        "--overwrite-env=true",
        "--dra-mode=off",
        "--dra-device-classes=NVIDIA=hami-core-gpu.project-hami.io@hami-core-gpu.project-hami.io,"
        "DCU=dra.hygon.com@dra.hygon.com",
        "--dra-split-count=10",
        "--default-memory=0",
        "--default-cores=0",
        "--default-gpu-num=1",
        "--memory-factor=1",
        "--node-lock-expiry-seconds=300",
        "--node-lock-wait-seconds=20",
        "--extender-http-timeout=30s",
        "--pair-healthz-url=https://127.0.0.1:10259/healthz",
        "--admission-policy-binding=hami-py-scheduling-state",
        "--allow-without-admission-policy=false",
        "--legacy-metrics=false",
        "--preemption=false",
        "--dra-bookkeeping=true",
        "--preemption-hold-seconds=60",
        "--leader-elect=true",
        "--leader-elect-resource-name=hami-scheduler",
        f"--leader-elect-resource-namespace={NAMESPACE}",
        "--shutdown-grace-seconds=15",
        "--log-level=info",
        "--v=4",
        "--gpu-core-policy=default",
        "--logging-format=text",
        "--cert-bootstrap-secret=hami-py-scheduler-tls",
        "--cert-dir=/tls",
        "--webhook-configuration-name=hami-py-webhook",
        "--service-name=hami-py-scheduler",
        f"--service-namespace={NAMESPACE}",
    ]
    assert env_of(hami) == {
        "POD_IP": {"fieldRef": {"fieldPath": "status.podIP"}},
        "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "POD_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
        "HAMI_NODE_INTEGRATION": "hami-device-plugin",
        # The memory limit in MiB: the process keeps an eighth of it for request bodies.
        "HAMI_MEMORY_LIMIT_MIB": {
            "resourceFieldRef": {
                "containerName": EXTENDER,
                "resource": "limits.memory",
                "divisor": "1Mi",
            }
        },
    }
    assert hami["resources"]["limits"]["memory"] == "512Mi"
    assert body_budget_mib(Settings(memory_limit_mib=512)) == 512 // 8
    assert body_budget_mib(Settings()) == 64
    # A budget given in the values replaces the share of the limit.
    given = container(render("scheduler.requestBodyBudgetMiB=96"), EXTENDER)
    assert env_of(given)["HAMI_REQUEST_BODY_BUDGET_MIB"] == "96"
    assert "HAMI_MEMORY_LIMIT_MIB" not in env_of(given)
    # A deleted pod answers the webhook until the Service lets go of it (the node tier deletes
    # the leader and creates pods at once), then has what is left of 30 s to finish its binds.
    assert hami["lifecycle"] == {"preStop": {"exec": {"command": ["sleep", "10"]}}}
    for probe, path in (
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
        ("startupProbe", "/readyz"),
    ):
        assert hami[probe]["httpGet"] == {"path": path, "port": "https", "scheme": "HTTPS"}, probe
    assert {p["name"]: p["containerPort"] for p in hami["ports"]} == {
        "https": 9443,
        "metrics": 9395,
    }
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["tls"]["emptyDir"]["medium"] == "Memory"
    assert {m["mountPath"] for m in hami["volumeMounts"]} == {"/tls", "/tmp"}, (
        "nothing else is writable"
    )

    kube_scheduler = container(docs, "kube-scheduler")
    assert kube_scheduler["command"] == ["kube-scheduler"]
    assert kube_scheduler["args"] == ["--config=/config/config.yaml", "--v=2"]
    # A hung extender fails kube-scheduler's liveness too, so the Lease goes to the other replica.
    for probe in ("startupProbe", "livenessProbe"):
        assert kube_scheduler[probe]["httpGet"] == {
            "path": "/healthz/pair",
            "port": 9443,
            "scheme": "HTTPS",
        }, probe

    service = find(docs, "Service")
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        ("https", 443, "https"),
        ("metrics", 9395, "metrics"),
    ]
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"]
    # A standby is a replica more; with it, a budget keeps one of them up through a drain.
    two = render("scheduler.replicas=2")
    assert find(two, "Deployment")["spec"]["replicas"] == 2
    assert find(two, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_helm_cert_manager_mode_mounts_its_secret_and_injects_the_ca() -> None:
    docs = render("certs.certManager.enabled=true")
    configuration = find(docs, "MutatingWebhookConfiguration")
    assert configuration["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": f"{NAMESPACE}/hami-py-scheduler-tls"
    }
    certificate = find(docs, "Certificate", "hami-py-scheduler-tls")["spec"]
    assert certificate["secretName"] == "hami-py-scheduler-tls"
    assert certificate["dnsNames"] == [
        "hami-py-scheduler",
        f"hami-py-scheduler.{NAMESPACE}",
        f"hami-py-scheduler.{NAMESPACE}.svc",
    ]
    assert certificate["ipAddresses"] == ["127.0.0.1"]
    assert certificate["issuerRef"]["name"] == "hami-py-ca"
    assert find(docs, "Certificate", "hami-py-ca")["spec"]["isCA"] is True
    args = container(docs, EXTENDER)["args"]
    assert "--tls-cert-file=/tls/tls.crt" in args and "--tls-key-file=/tls/tls.key" in args
    assert not [
        a for a in args if a.startswith(("--cert-", "--webhook-configuration", "--service-"))
    ]
    volumes = {
        v["name"]: v for v in find(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    }
    assert volumes["tls"]["secret"]["secretName"] == "hami-py-scheduler-tls"

    docs = render(
        "certs.certManager.enabled=true",
        'certs.certManager.issuerRef={"name":"corp-ca","kind":"ClusterIssuer"}',
    )
    assert {d["kind"] for d in docs if d["apiVersion"].startswith("cert-manager.io")} == {
        "Certificate"
    }
    assert find(docs, "Certificate")["spec"]["issuerRef"] == {
        "name": "corp-ca",
        "kind": "ClusterIssuer",
    }


def test_helm_service_monitor_when_asked() -> None:
    docs = render("metrics.serviceMonitor.enabled=true", "metrics.podAnnotations=false")
    monitor = find(docs, "ServiceMonitor")
    # honorLabels: the per-container series keep their own namespace and pod labels (the
    # dashboard and the alert rules read them), not the scheduler pod's.
    assert monitor["spec"]["endpoints"] == [
        {
            "port": "metrics",
            "path": "/metrics",
            "honorLabels": True,
            "scheme": "http",
            "interval": "30s",
        }
    ]
    assert (
        "prometheus.io/scrape"
        not in find(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    )


# --- node side and presets -------------------------------------------------------------------------


def volume_paths(docs: list[Obj]) -> dict[str, str]:
    volumes = find(docs, "DaemonSet")["spec"]["template"]["spec"]["volumes"]
    return {v["name"]: v["hostPath"]["path"] for v in volumes if "hostPath" in v}


def mounts(c: Obj) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in c["volumeMounts"]}


def test_helm_gke_preset_sets_every_lab14_path() -> None:
    docs = render("preset=gke")
    plugin = container(docs, "device-plugin", "DaemonSet")
    env = env_of(plugin)
    assert env["NVIDIA_DRIVER_ROOT"] == GKE_NVIDIA
    assert env["HOOK_PATH"] == GKE_NVIDIA
    assert env["LD_LIBRARY_PATH"] == "/driver-root/lib64"
    assert [e["name"] for e in plugin["env"]].count("LD_LIBRARY_PATH") == 1
    paths = volume_paths(docs)
    assert paths["lib"] == f"{GKE_NVIDIA}/vgpu"
    assert paths["driver-root"] == GKE_NVIDIA
    assert mounts(plugin)["lib"] == f"{GKE_NVIDIA}/vgpu"
    assert mounts(plugin)["driver-root"] == "/driver-root"
    assert (
        plugin["lifecycle"]["postStart"]["exec"]["command"][-1]
        == f"/k8s-vgpu/bin/vgpu-init.sh {GKE_NVIDIA}/vgpu/"
    )
    daemonset = find(docs, "DaemonSet")["spec"]["template"]
    assert daemonset["spec"]["nodeSelector"] == {"gpu": "on"}
    assert daemonset["metadata"]["labels"]["hami.io/webhook"] == "ignore"
    assert plugin["image"] == "projecthami/hami:v2.10.0"
    # The monitor cannot run unprivileged on COS: not rendered unless asked for.
    assert [c["name"] for c in daemonset["spec"]["containers"]] == ["device-plugin"]
    assert "ctrs" not in paths
    # Our webhook's driver profile.
    assert env_of(container(docs, EXTENDER))["HAMI_DRIVER_PROFILE"] == "gke"
    # GKE admits critical-priority pods outside kube-system only with a quota.
    quota = find(docs, "ResourceQuota", "hami-py-critical-pods")
    assert quota["metadata"]["namespace"] == NAMESPACE
    assert quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == [
        "system-node-critical",
        "system-cluster-critical",
    ]
    assert ("ResourceQuota", "hami-py-critical-pods") not in kinds(
        render("preset=gke", namespace="kube-system")
    )
    assert daemonset["spec"]["priorityClassName"] == "system-node-critical"


def test_helm_gke_monitor_when_asked_for_is_privileged_with_gke_paths() -> None:
    docs = render("preset=gke", "devicePlugin.monitor.enabled=true")
    monitor = container(docs, "vgpu-monitor", "DaemonSet")
    assert monitor["securityContext"] == {"privileged": True}
    assert mounts(monitor)["ctrs"] == f"{GKE_NVIDIA}/vgpu/containers"
    assert volume_paths(docs)["ctrs"] == f"{GKE_NVIDIA}/vgpu/containers"
    assert env_of(monitor)["HOOK_PATH"] == f"{GKE_NVIDIA}/vgpu"
    assert env_of(monitor)["LD_LIBRARY_PATH"] == "/driver-root/lib64"


def test_helm_lab14_set_json_extra_envs_win_over_the_preset() -> None:
    docs = render(
        "preset=gke",
        'devicePlugin.extraEnvs=[{"name":"LD_LIBRARY_PATH","value":"/driver-root/lib64:/opt/x"},{"name":"A","value":"1"}]',
        "devicePlugin.libPath=/mnt/vgpu",
        "devicePlugin.enabled=true",
    )
    plugin = container(docs, "device-plugin", "DaemonSet")
    assert [e for e in plugin["env"] if e["name"] == "LD_LIBRARY_PATH"] == [
        {"name": "LD_LIBRARY_PATH", "value": "/driver-root/lib64:/opt/x"}
    ]
    assert env_of(plugin)["A"] == "1"
    assert volume_paths(docs)["lib"] == "/mnt/vgpu"
    assert env_of(plugin)["HOOK_PATH"] == GKE_NVIDIA
    assert ("DaemonSet", "hami-py-device-plugin") not in kinds(
        render("preset=gke", "devicePlugin.enabled=false")
    )


def test_helm_generic_device_plugin_keeps_hami_defaults() -> None:
    assert "DaemonSet" not in {d["kind"] for d in render()}, "off unless asked for"
    docs = render("devicePlugin.enabled=true")
    plugin = container(docs, "device-plugin", "DaemonSet")
    env = env_of(plugin)
    assert env["HOOK_PATH"] == "/usr/local"
    assert env["NVIDIA_DRIVER_ROOT"] == "/"
    assert "LD_LIBRARY_PATH" not in env
    assert volume_paths(docs)["lib"] == "/usr/local/vgpu"
    monitor = container(docs, "vgpu-monitor", "DaemonSet")
    assert monitor["securityContext"]["allowPrivilegeEscalation"] is False
    assert mounts(monitor)["ctrs"] == "/usr/local/vgpu/containers"
    assert "HAMI_DRIVER_PROFILE" not in env_of(container(docs, EXTENDER))
    assert "ResourceQuota" not in {d["kind"] for d in docs}
    assert rules(find(docs, "ClusterRole", "hami-py-device-plugin")) == [
        ("", "pods", (), ("get", "list", "watch", "update", "patch")),
        ("", "nodes", (), ("get", "list", "watch", "update", "patch")),
    ]
    device_config = yaml.safe_load(
        find(docs, "ConfigMap", "hami-py-device-plugin-device")["data"]["device-config.yaml"]
    )
    assert device_config["nvidia"]["deviceSplitCount"] == 10
    assert json.loads(find(docs, "ConfigMap", "hami-py-device-plugin")["data"]["config.json"]) == {
        "nodeconfig": []
    }


# --- the schema says no clearly -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # Lab 14's failure: `--set devicePlugin.extraEnvs.X=Y` made a map, HAMi rendered bad YAML.
        (
            ["devicePlugin.extraEnvs.LD_LIBRARY_PATH=/driver-root/lib64"],
            "at '/devicePlugin/extraEnvs': got object, want array",
        ),
        # The valid names, as hami serve lists them, and how to write a chain with --set.
        (
            ["scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy=mutex;binpack"],
            'unknown GPU scheduler policy "mutex;binpack" in "mutex;binpack"; valid names: '
            f"{', '.join(GPU_POLICY_NAMES)}, or a chain of them joined by commas, e.g. "
            "mutex,binpack (on the command line escape the comma: --set "
            "scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy=mutex\\,binpack)",
        ),
        (
            ["scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy=mutex\\, spreadd"],
            'unknown GPU scheduler policy "spreadd" in "mutex, spreadd"; valid names: binpack,',
        ),
        (["preset=eks"], "at '/preset': value must be one of '', 'gke'"),
        (
            ["webhook.failurePolicy=fail"],
            "at '/webhook/failurePolicy': value must be one of 'Fail', 'Ignore'",
        ),
        (
            ["webhook.injection.mode=sidecar"],
            "at '/webhook/injection/mode': value must be one of 'hami-device-plugin', 'standalone'",
        ),
        (["devicePlugin.extraEnv[0].name=X"], "additional properties 'extraEnv' not allowed"),
        (
            ["devicePlugin.nodeSelector.gpu=true"],
            "at '/devicePlugin/nodeSelector/gpu': got boolean, want string",
        ),
        (
            ['devicePlugin.extraEnvs=[{"name":"X"}]'],
            'devicePlugin.extraEnvs: "X" needs a value or a valueFrom',
        ),
    ],
)
def test_helm_refuses_wrong_values_with_a_clear_message(values: list[str], message: str) -> None:
    result = helm(*template_args(*values), check=False)
    assert result.returncode != 0, result.stdout[:500]
    assert message in result.stderr, result.stderr


@pytest.mark.parametrize("policy", ["binpack", "mutex,binpack", "topology-aware, spread", "numa"])
def test_helm_accepts_every_policy_hami_serve_accepts(policy: str) -> None:
    escaped = policy.replace(",", "\\,")  # --set splits on unescaped commas
    docs = render(f"scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy={escaped}")
    assert f"--gpu-scheduler-policy={policy}" in container(docs, EXTENDER)["args"]


# --- what the chart passes, `hami serve` understands ----------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["preset=gke"],
        [
            "scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy=mutex\\,binpack",
            "scheduler.logFormat=json",
        ],
    ],
)
def test_helm_rendered_args_and_env_are_valid_hami_serve_settings(values: Sequence[str]) -> None:
    settings = settings_from(container(render(*values), EXTENDER))
    assert settings.identity == "hami-py-scheduler-7d9f-abcde"
    assert settings.leader_elect is True
    assert settings.leader_elect_resource_namespace == NAMESPACE
    assert settings.cert_bootstrap_secret == "hami-py-scheduler-tls"
    assert settings.cert_dir == "/tls"
    assert settings.service_name == "hami-py-scheduler"
    assert settings.port == 9443
    assert settings.node_integration == "hami-device-plugin"
    assert settings.driver_profile == ("gke" if "preset=gke" in values else "none")


def test_helm_hamis_device_config_values_reach_hami_serve() -> None:
    """devices.nvidia.gpuCorePolicy and devices.ascend.runtimeClassName and hamiVnpuCore,
    which HAMi's chart writes into its default device config, configure hami serve the same;
    beside a device-config override, as in HAMi's chart, the override's sections count."""
    from hami.runtime.config import device_config, gpu_core_policy

    values = (
        "devices.nvidia.gpuCorePolicy=force",
        "devices.ascend.enabled=true",
        "devices.ascend.runtimeClassName=ascend",
        "devices.ascend.hamiVnpuCore=true",
    )
    docs = render(*values, "devicePlugin.enabled=true")
    settings = settings_from(container(docs, EXTENDER))
    assert (settings.ascend_runtime_class_name, settings.ascend_hami_vnpu_core) == ("ascend", True)
    assert (settings.enable_ascend, settings.enable_iluvatar) == (True, False)
    devices = device_config(settings)
    assert gpu_core_policy(settings, devices) == "force"
    (npu,) = [f for f in devices.families.others if f.wire.type == "Ascend910B3"]
    claim = npu.claim({"resources": {"limits": {"huawei.com/Ascend910B3": "1"}}}, {})
    assert claim.pod_fields == (("runtimeClassName", "ascend"),)
    assert npu.soft_split_default  # type: ignore[attr-defined]
    plugin = find(docs, "ConfigMap", "hami-py-device-plugin-device")["data"]["device-config.yaml"]
    assert yaml.safe_load(plugin)["nvidia"]["gpuCorePolicy"] == "force"
    # The defaults: NVIDIA's default policy, no Ascend flag.
    plain = container(render(), EXTENDER)["args"]
    assert "--gpu-core-policy=default" in plain
    assert not any(a.startswith(("--ascend-", "--enable-")) for a in plain)
    # Beside an override: none of them, the file's sections are read.
    content = json.dumps({"content": "nvidia: {gpuCorePolicy: disable}\n"})
    args = container(render(*values, f"device-config={content}"), EXTENDER)["args"]
    assert not any(a.startswith(("--ascend-", "--gpu-core-policy")) for a in args)


def test_helm_schedules_ascend_and_iluvatar_only_where_enabled_as_hamis_chart_does(
    tmp_path: Path,
) -> None:
    """HAMi's chart passes --enable-ascend and --enable-iluvatar for devices.ascend.enabled and
    devices.iluvatar.enabled (false by default) and its scheduler registers those families
    only then; hami serve's families follow the same values, beside an override too."""

    def types(*values: str) -> set[str]:
        return {f.wire.type for f in served_families(render(*values), tmp_path).members}

    plain = types()
    assert "Ascend910B3" not in plain and "MR-V100" not in plain and "DCU" in plain
    assert {"Ascend910B3", "Ascend310P"} <= types("devices.ascend.enabled=true") - plain
    assert types("devices.iluvatar.enabled=true") - plain == {
        "MR-V100",
        "MR-V50",
        "BI-V150",
        "BI-V100",
    }
    from hami.engine.families.ascend import DEFAULT_VNPUS

    content = json.dumps({"content": yaml.safe_dump({"vnpus": DEFAULT_VNPUS})})
    assert "Ascend910B3" in types("devices.ascend.enabled=true", f"device-config={content}")


def managed(*values: str) -> list[str]:
    """The extender's managedResources as rendered, by name."""
    docs = render(*values)
    (scheduler,) = [d for d in docs if d["kind"] == "ConfigMap" and "config.yaml" in d["data"]]
    config = yaml.safe_load(scheduler["data"]["config.yaml"])
    return [r["name"] for r in config["extenders"][0]["managedResources"]]


def test_helm_lists_ascend_and_iluvatar_resources_only_where_enabled_as_hamis_chart() -> None:
    """HAMi's chart lists a gated family's resources (its defaults, its customresources) for
    kube-scheduler only where the family is enabled; so do ours, and so do the names a
    device-config override gives them: a pod of a family left off is no pod of ours, and
    kube-scheduler checks its resources as any other."""
    npu = [f"example.com/npu{s}" for s in ("", "-memory")]
    chip = {
        "commonWord": "X",
        "chipName": "X",
        "resourceName": npu[0],
        "resourceMemoryName": npu[1],
    }
    override = json.dumps({"content": yaml.safe_dump({"vnpus": {"configs": [chip]}})})
    custom = 'devices.ascend.customresources=["example.com/extra"]'
    plain = managed(f"device-config={override}", custom)
    assert not any(n.startswith(("huawei.com/", "iluvatar.ai/", "example.com/")) for n in plain)
    for name in GATED:
        own = Families(gated_members(name)).other_resource_names()
        listed = managed(f"devices.{name}.enabled=true")
        assert listed == [*plain, *own] and set(own) - set(plain) == set(own), name
    enabled = managed("devices.ascend.enabled=true", f"device-config={override}", custom)
    assert {*npu, "example.com/extra"} <= set(enabled)


def test_helm_standalone_injection_reaches_hami_serve() -> None:
    hami = container(render("preset=gke", "webhook.injection.mode=standalone"), EXTENDER)
    settings = settings_from(hami)
    assert settings.node_integration == "standalone"
    assert settings.hook_path == f"{GKE_NVIDIA}/vgpu"
    assert settings.driver_profile == "gke"


def test_helm_cert_manager_args_parse(tmp_path: Path) -> None:
    hami = container(render("certs.certManager.enabled=true"), EXTENDER)
    for name in ("tls.crt", "tls.key"):
        (tmp_path / name).write_text("x")
    hami["args"] = [a.replace("=/tls/", f"={tmp_path}/") for a in hami["args"]]
    settings = settings_from(hami)
    assert settings.tls_cert_file == f"{tmp_path}/tls.crt"
    assert not settings.cert_bootstrap_secret


def test_helm_admission_policy_names_the_writers_of_scheduling_state() -> None:
    """The CEL itself runs in kube-apiserver in the e2e tier (tests/e2e/test_attacks.py)."""
    docs = render('admissionPolicy.schedulerUsers=["alice"]')
    policy = find(docs, "ValidatingAdmissionPolicy", "hami-py-scheduling-state")["spec"]
    variables = {v["name"]: v["expression"] for v in policy["variables"]}
    assert variables["scheduler"] == (
        f"request.userInfo.username in ['system:serviceaccount:{NAMESPACE}:hami-py-scheduler',"
        "'alice']"
    )
    assert variables["plugin"] == (
        f"request.userInfo.username in ['system:serviceaccount:{NAMESPACE}:hami-py-device-plugin',"
        "'system:serviceaccount:kube-system:hami-device-plugin']"
    )
    assert policy["failurePolicy"] == "Fail"
    (rule,) = policy["matchConstraints"]["resourceRules"]
    assert rule["operations"] == ["CREATE", "UPDATE"]
    assert set(rule["resources"]) == {
        "pods",
        "pods/status",
        "pods/binding",
        "nodes",
        "nodes/status",
    }
    binding = find(docs, "ValidatingAdmissionPolicyBinding", "hami-py-scheduling-state")["spec"]
    assert binding == {"policyName": "hami-py-scheduling-state", "validationActions": ["Deny"]}
    kinds = {
        d["kind"]
        for d in render(
            "admissionPolicy.enabled=false", "admissionPolicy.allowSchedulerWithout=true"
        )
    }
    assert "ValidatingAdmissionPolicy" not in kinds


def test_helm_webhook_url_replaces_the_service() -> None:
    docs = render("webhook.url=https://127.0.0.1:9443/webhook")
    (webhook,) = find(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert webhook["clientConfig"] == {"url": "https://127.0.0.1:9443/webhook"}


def test_helm_metrics_exposure_follows_values() -> None:
    docs = render(
        "metrics.bindAddress=127.0.0.1",
        "metrics.tls=true",
        "metrics.podLabels=false",
        "metrics.serviceMonitor.enabled=true",
    )
    args = container(docs, EXTENDER)["args"]
    assert "--metrics-bind-address=127.0.0.1" in args
    assert "--metrics-tls=true" in args and "--metrics-pod-labels=false" in args
    template = find(docs, "Deployment")["spec"]["template"]
    assert template["metadata"]["annotations"]["prometheus.io/scheme"] == "https"
    (endpoint,) = find(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {
        "ca": {"secret": {"name": "hami-py-scheduler-tls", "key": "ca.crt"}},
        "serverName": f"hami-py-scheduler.{NAMESPACE}.svc",
    }


PROMETHEUS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}


def test_helm_network_policy_admits_only_the_named_scrapers_to_the_metrics_port() -> None:
    assert not [d for d in render() if d["kind"] == "NetworkPolicy"], "off by default"
    docs = render(
        "metrics.networkPolicy.enabled=true",
        f"metrics.networkPolicy.from=[{json.dumps(PROMETHEUS)}]",
    )
    policy = find(docs, "NetworkPolicy")
    assert policy["metadata"]["namespace"] == NAMESPACE
    pods = find(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert (
        selector.items() <= pods.items()
        and selector["app.kubernetes.io/component"] == "hami-scheduler"
    )
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    open_to_all, metrics = policy["spec"]["ingress"]
    # kube-apiserver calls the webhook from wherever it runs; the kubelet probes kube-scheduler.
    assert "from" not in open_to_all
    assert [p["port"] for p in open_to_all["ports"]] == [9443, 10259]
    assert metrics == {"from": [PROMETHEUS], "ports": [{"port": 9395, "protocol": "TCP"}]}
    ports = {p["name"]: p["containerPort"] for p in container(docs, EXTENDER)["ports"]}
    assert ports == {"https": 9443, "metrics": 9395}
    # Named nobody: the metrics port is closed to every peer (an empty `from` would open it).
    (closed,) = find(render("metrics.networkPolicy.enabled=true"), "NetworkPolicy")["spec"][
        "ingress"
    ]
    assert "from" not in closed and 9395 not in [p["port"] for p in closed["ports"]]
    refused = helm(
        *template_args("metrics.networkPolicy.enabled=true", "metrics.networkPolicy.from=[{}]"),
        check=False,
    )
    assert "at '/metrics/networkPolicy/from/0': minProperties: got 0, want 1" in refused.stderr


def test_helm_admission_policy_protects_what_the_webhook_refuses_at_creation() -> None:
    """One list of scheduler-owned keys (hami.engine.names), enforced twice."""
    from hami.engine import names

    policy = find(render(), "ValidatingAdmissionPolicy")["spec"]
    (denied,) = [v["expression"] for v in policy["variables"] if v["name"] == "denied"]
    for key in names.SCHEDULER_OWNED_KEYS:
        assert f"'{key}'" in denied, key
    for prefix in names.SCHEDULER_OWNED_PREFIXES:
        assert f"k.startsWith('{prefix}')" in denied, prefix


# --- HAMi's chart's values (Lab 14, Step 3) ---------------------------------------------------------


def lab14_step3() -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(lab14_step3_manifest()) if doc]


def test_helm_lab14_step3_names_are_the_ones_the_labs_commands_use() -> None:
    """`rollout status deploy/hami-scheduler`, `logs deploy/hami-scheduler -c
    vgpu-scheduler-extender`, `get pods -l app.kubernetes.io/instance=hami`, `get pods -l
    app.kubernetes.io/component=hami-device-plugin`, `patch ds hami-device-plugin` removing
    containers/1 (vgpu-monitor), `logs ds/hami-device-plugin -c device-plugin`."""
    docs = lab14_step3()
    deployment = find(docs, "Deployment", "hami-scheduler")
    assert deployment["spec"]["replicas"] == 1  # so `logs deploy/...` reads the one that placed
    scheduler = deployment["spec"]["template"]
    assert [c["name"] for c in scheduler["spec"]["containers"]] == ["kube-scheduler", EXTENDER]
    plugin = find(docs, "DaemonSet", "hami-device-plugin")["spec"]["template"]
    assert [c["name"] for c in plugin["spec"]["containers"]] == ["device-plugin", "vgpu-monitor"]
    for pod, component in ((scheduler, "hami-scheduler"), (plugin, "hami-device-plugin")):
        labels = pod["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "hami"
        assert labels["app.kubernetes.io/component"] == component


def test_helm_lab14_step3_flags_mean_what_they_mean_in_hamis_chart() -> None:
    docs = lab14_step3()
    daemonset = find(docs, "DaemonSet", "hami-device-plugin")
    assert daemonset["metadata"]["namespace"] == "kube-system"
    plugin = container(docs, "device-plugin", "DaemonSet")
    env = env_of(plugin)
    # HOOK_PATH follows global.gpuHookPath: /usr/local is read-only on COS.
    assert env["HOOK_PATH"] == GKE_NVIDIA
    assert env["NVIDIA_DRIVER_ROOT"] == GKE_NVIDIA
    assert [e for e in plugin["env"] if e["name"] == "LD_LIBRARY_PATH"] == [
        {"name": "LD_LIBRARY_PATH", "value": "/driver-root/lib64"}
    ]
    assert (
        plugin["lifecycle"]["postStart"]["exec"]["command"][-1]
        == f"/k8s-vgpu/bin/vgpu-init.sh {GKE_NVIDIA}/vgpu/"
    )
    assert mounts(plugin)["lib"] == f"{GKE_NVIDIA}/vgpu"
    assert mounts(plugin)["driver-root"] == "/driver-root"
    paths = volume_paths(docs)
    assert paths["lib"] == f"{GKE_NVIDIA}/vgpu"
    assert paths["driver-root"] == GKE_NVIDIA
    assert paths["ctrs"] == f"{GKE_NVIDIA}/vgpu/containers"
    # HAMi's chart runs its monitor too (Lab 14 then removes it, as it would with HAMi's).
    monitor = container(docs, "vgpu-monitor", "DaemonSet")
    assert mounts(monitor)["ctrs"] == f"{GKE_NVIDIA}/vgpu/containers"
    assert env_of(monitor)["HOOK_PATH"] == f"{GKE_NVIDIA}/vgpu"
    # Nothing is written under the read-only /usr/local any more.
    assert not [p for p in paths.values() if p.startswith("/usr/local")]
    settings = settings_from(container(docs, EXTENDER))
    assert (settings.gpu_scheduler_policy, settings.node_scheduler_policy) == ("spread", "binpack")


def test_helm_hami_scheduler_policy_values_set_the_defaults() -> None:
    docs = render(
        "scheduler.defaultSchedulerPolicy.nodeSchedulerPolicy=spread",
        "scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy=topology-aware",
        "devicePlugin.enabled=true",
    )
    settings = settings_from(container(docs, EXTENDER))
    assert (settings.gpu_scheduler_policy, settings.node_scheduler_policy) == (
        "topology-aware",
        "spread",
    )
    assert env_of(container(docs, "device-plugin", "DaemonSet"))["ENABLE_TOPOLOGY_SCORE"] == "true"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        # HAMi's chart values with no meaning in this chart: refused, never ignored.
        (
            "global.imageRegistry=registry.example",
            "at '/global': additional properties 'imageRegistry' not allowed",
        ),
        (
            "global.managedNodeSelectorEnable=true",
            "additional properties 'managedNodeSelectorEnable' not allowed",
        ),
        (
            "devicePlugin.runtimeClassName=nvidia",
            "at '/devicePlugin': additional properties 'runtimeClassName' not allowed",
        ),
        (
            "scheduler.extender.image.tag=v2.10.0",
            "at '/scheduler': additional properties 'extender' not allowed",
        ),
        (
            "scheduler.defaultSchedulerPolicy.gpuPolicy=binpack",
            "additional properties 'gpuPolicy' not allowed",
        ),
        ("resourceName=nvidia.com/vgpu", "additional properties 'resourceName' not allowed"),
        # This chart's names before it took HAMi's.
        (
            "scheduler.gpuSchedulerPolicy=binpack",
            "additional properties 'gpuSchedulerPolicy' not allowed",
        ),
        (
            "devicePlugin.gpuHookPath=/x",
            "at '/devicePlugin': additional properties 'gpuHookPath' not allowed",
        ),
    ],
)
def test_helm_hami_values_without_a_meaning_here_are_refused(value: str, message: str) -> None:
    result = helm(*template_args(value), check=False)
    assert result.returncode != 0, result.stdout[:300]
    assert message in result.stderr, result.stderr


def test_helm_hamis_plugin_values_imply_the_plugin_except_in_standalone_mode() -> None:
    assert ("DaemonSet", "hami-py-device-plugin") in kinds(render("global.gpuHookPath=/opt/hook"))
    assert (
        env_of(container(render("global.gpuHookPath=/opt/hook"), "device-plugin", "DaemonSet"))[
            "HOOK_PATH"
        ]
        == "/opt/hook"
    )
    assert "DaemonSet" not in {
        d["kind"]
        for d in render("webhook.injection.mode=standalone", "devicePlugin.libPath=/opt/vgpu")
    }
    assert "DaemonSet" not in {
        d["kind"] for d in render("global.gpuHookPath=/opt/hook", "devicePlugin.enabled=false")
    }


# --- standalone without HAMi's device plugin (Lab 12) -----------------------------------------------


def test_helm_lab12_standalone_registers_gfd_nodes_and_installs_libvgpu() -> None:
    docs = render(*LAB12)
    settings = settings_from(container(docs, EXTENDER))
    assert settings.node_integration == "standalone"
    assert settings.gfd_split_count == 4
    assert settings.hook_path == f"{GKE_NVIDIA}/vgpu"
    assert ("DaemonSet", "hami-py-device-plugin") not in kinds(docs)
    installer = find(docs, "DaemonSet", "hami-py-libvgpu-installer")["spec"]["template"]
    assert installer["metadata"]["labels"]["hami.io/webhook"] == "ignore"
    pod = installer["spec"]
    (install,) = pod["initContainers"]
    assert install["image"] == "projecthami/hami:v2.10.0"
    assert env_of(install) == {
        "SOURCE": "/k8s-vgpu/lib/nvidia/libvgpu.so",
        "PRELOAD": "/usr/local/vgpu/libvgpu.so",
    }
    assert install["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in install["securityContext"]
    script = install["command"][-1]
    for line in (
        'cp "$SOURCE" /host/vgpu/libvgpu.so.new',
        "mv -f /host/vgpu/libvgpu.so.new /host/vgpu/libvgpu.so",
        "chmod 1777 /host/vgpu/containers /host/vgpulock",
    ):
        assert line in script
    hosts = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    # The folder the webhook mounts libvgpu.so and the cache folders from.
    assert hosts == {"vgpu": settings.hook_path, "vgpulock": "/tmp/vgpulock"}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert "priorityClassName" not in pod
    assert [c["name"] for c in pod["containers"]] == ["pause"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            ["libvgpuInstaller.enabled=true"],
            "at '/libvgpuInstaller/image': minLength: got 0, want 1",
        ),
        (
            ["gfdRegistration.enabled=true"],
            "gfdRegistration.enabled=true needs webhook.injection.mode=standalone",
        ),
        (
            [
                "devicePlugin.enabled=true",
                "libvgpuInstaller.enabled=true",
                "libvgpuInstaller.image=x",
            ],
            "libvgpuInstaller.enabled=true and HAMi's device plugin (devicePlugin) would both write",
        ),
        (
            ["gfdRegistration.splitCount=0"],
            "at '/gfdRegistration/splitCount': minimum: got 0, want 1",
        ),
        (["dra.splitCount=0"], "at '/dra/splitCount': minimum: got 0, want 1"),
    ],
)
def test_helm_standalone_values_that_cannot_work_are_refused(
    values: list[str], message: str
) -> None:
    result = helm(*template_args(*values), check=False)
    assert result.returncode != 0, result.stdout[:300]
    assert message in result.stderr, result.stderr


def test_helm_libvgpu_installer_script_installs_as_described(tmp_path: Path) -> None:
    """The rendered script, run by sh against a stand-in host (paths under tmp_path)."""
    (install,) = find(render(*LAB12), "DaemonSet")["spec"]["template"]["spec"]["initContainers"]
    host = tmp_path / "host"
    (host / "vgpu").mkdir(parents=True)
    (host / "vgpulock").mkdir()
    (host / "vgpu" / "libvgpu.so").write_bytes(b"old")
    old_inode = (host / "vgpu" / "libvgpu.so").stat().st_ino
    source = tmp_path / "image-libvgpu.so"
    source.write_bytes(b"\x7fELF new")
    script = install["command"][-1].replace("/host/", f"{host}/")
    env = {**env_of(install), "SOURCE": str(source), "PATH": os.environ["PATH"]}
    subprocess.run([*install["command"][:-1], script], env=env, check=True, timeout=30)
    lib = host / "vgpu" / "libvgpu.so"
    assert lib.read_bytes() == b"\x7fELF new"
    assert lib.stat().st_ino != old_inode, "replaced by rename, not written over"
    assert (lib.stat().st_mode & 0o777) == 0o644
    assert (host / "vgpu" / "ld.so.preload").read_text() == "/usr/local/vgpu/libvgpu.so\n"
    for folder in (host / "vgpu" / "containers", host / "vgpulock"):
        assert (folder.stat().st_mode & 0o7777) == 0o1777, folder
    assert sorted(p.name for p in (host / "vgpu").iterdir()) == [
        "containers",
        "ld.so.preload",
        "libvgpu.so",
    ]


@pytest.mark.parametrize(
    ("values", "sleep", "grace"),
    [
        (["scheduler.preStopSleepSeconds=0"], None, "25"),
        (
            ["scheduler.preStopSleepSeconds=20", "scheduler.terminationGracePeriodSeconds=60"],
            "20",
            "35",
        ),
        (["scheduler.terminationGracePeriodSeconds=12"], "10", "1"),
    ],
)
def test_helm_pre_stop_sleep_comes_out_of_the_shutdown_grace(
    values: list[str], sleep: str | None, grace: str
) -> None:
    hami = container(render(*values), EXTENDER)
    if sleep is None:
        assert "lifecycle" not in hami
    else:
        assert hami["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", sleep]
    assert f"--shutdown-grace-seconds={grace}" in hami["args"]
