"""Our chart installed on the real control plane: release names, its RBAC, its scheduler run by
the harness with the rendered flags and environment, and server-side dry runs of pods."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import secrets
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from hami.engine.quantity import parse_quantity
from tests.builders.chart import (
    EXTENDER,
    Obj,
    container,
    env_of,
    render,
)
from tests.e2e.cluster import (
    ADMISSION_POLICY,
    ControlPlane,
)
from tests.e2e.kube import Kube

RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")

GPU_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "chart-probe"},
    "spec": {
        "containers": [
            {
                "name": "cuda",
                "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}},
            }
        ]
    },
}


def release_name(prefix: str) -> str:
    # Contains "hami", so the chart's fullname is the release name itself.
    return f"{prefix}-{secrets.token_hex(2)}"


def dry_run(kube: Kube, pod: Obj, namespace: str) -> subprocess.CompletedProcess[str]:
    return kube(
        "create",
        "--dry-run=server",
        "-o",
        "json",
        "-n",
        namespace,
        "-f",
        "-",
        stdin=json.dumps(pod),
        check=False,
    )


def stored(kube: Kube, pod: Obj, namespace: str) -> Obj:
    """The pod as the API server would store it (the webhook's patch applied), not created."""
    result = dry_run(kube, pod, namespace)
    assert result.returncode == 0, result.stderr
    out: Obj = json.loads(result.stdout)
    return out


def variant(pod: Obj, **changes: Any) -> Obj:
    out: Obj = json.loads(json.dumps(pod))
    for path, value in changes.items():
        target = out
        *parents, last = path.split("__")
        for p in parents:
            target = target[p]
        target[last] = value
    return out


@contextlib.contextmanager
def chart_rbac(kube: Kube, docs: Sequence[Obj], folder: Path) -> Iterator[None]:
    """Apply the chart's ServiceAccount and roles; remove the cluster-scoped ones afterwards."""
    objects = [d for d in docs if d["kind"] in RBAC_KINDS]
    manifest = folder / "chart-rbac.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    kube("apply", "-f", str(manifest))
    try:
        yield
    finally:
        cluster_scoped = [d for d in objects if d["kind"].startswith("Cluster")]
        (folder / "chart-rbac-cluster.json").write_text(
            json.dumps({"apiVersion": "v1", "kind": "List", "items": cluster_scoped})
        )
        kube("delete", "--ignore-not-found", "-f", str(folder / "chart-rbac-cluster.json"))


def service_account_kubeconfig(
    control_plane: ControlPlane, namespace: str, account: str, path: Path
) -> Path:
    """A kubeconfig holding a TokenRequest token of the chart's ServiceAccount."""
    token = control_plane.kubectl(
        "create", "token", account, "-n", namespace, "--duration=2h"
    ).stdout.strip()
    admin = yaml.safe_load(control_plane.kubeconfig.read_text())
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "e2e", "user": account}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(kubeconfig))
    path.chmod(0o600)
    return path


def harness_args(
    rendered: Sequence[str], kubeconfig: Path, *, drop: Sequence[str] = ()
) -> list[str]:
    """The rendered args minus what the harness passes itself (see the module docstring)."""
    owned = ("--bind-address=", "--port=", "--extender-port=", "--metrics-port=", *drop)
    args = [a for a in rendered if not a.startswith(owned)]
    args = [
        "--metrics-bind-address=127.0.0.1" if a.startswith("--metrics-bind-address=") else a
        for a in args
    ]
    return [*args, f"--kubeconfig={kubeconfig}"]


def harness_env(rendered: Obj, pod_name: str, namespace: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for name, value in env_of(rendered).items():
        if isinstance(value, str):
            env[name] = value
        elif value == {"fieldRef": {"fieldPath": "metadata.name"}}:
            env[name] = pod_name
        elif value == {"fieldRef": {"fieldPath": "metadata.namespace"}}:
            env[name] = namespace
        elif value == {"fieldRef": {"fieldPath": "status.podIP"}}:
            env[name] = "127.0.0.1"
        elif "resourceFieldRef" in value:
            # The kubelet's Downward API: the container's own resource over the divisor,
            # rounded up (the chart's request-body budget comes from its memory limit).
            ref = value["resourceFieldRef"]
            kind, _, resource = ref["resource"].partition(".")
            amount = parse_quantity(rendered["resources"][kind][resource])
            env[name] = str(math.ceil(amount / parse_quantity(ref.get("divisor", "1"))))
        else:
            raise AssertionError(f"no stand-in for {name}: {value}")
    return env


BOOTSTRAP_FLAGS = (
    "--cert-bootstrap-secret=",
    "--cert-dir=",
    "--webhook-configuration-name=",
    "--service-name=",
    "--service-namespace=",
)


@contextlib.contextmanager
def release_policy_binding(kube: Kube, release: str) -> Iterator[None]:
    """The release's own `<release>-scheduling-state` binding, of the harness's policy: what
    the chart's scheduler checks for at start (hami.runtime.preflight), and all its RBAC lets
    it read."""
    name = f"{release}-scheduling-state"
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": ADMISSION_POLICY, "validationActions": ["Deny"]},
    }
    kube.apply(json.dumps(binding))
    try:
        yield
    finally:
        kube("delete", "validatingadmissionpolicybinding", name, "--ignore-not-found")


@contextlib.contextmanager
def chart_scheduler(
    control_plane: ControlPlane, kube: Kube, namespace: str, folder: Path, *values: str
) -> Iterator[list[str]]:
    """hami serve restarted with the args and environment the chart renders for `values`, as
    the chart's ServiceAccount under the chart's RBAC, following the Lease the chart's
    kube-scheduler container would hold; yields its args and restores the default after."""
    release = release_name("hami-chart")
    docs = render(*values, namespace=namespace, release=release)
    hami = container(docs, EXTENDER)
    pod_name = f"{release}-scheduler-6b7c9-x2x4q"
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "hami-scheduler", "namespace": namespace},
        "spec": {
            "holderIdentity": f"{pod_name}_0b9c52e4-e2e",
            "leaseDurationSeconds": 120,
            "acquireTime": now,
            "renewTime": now,
        },
    }
    kube.apply(json.dumps(lease), namespace)
    # The harness's admission policy is the one of a release in hami-system; this scheduler is
    # another release's ServiceAccount.
    account = f"system:serviceaccount:{namespace}:{release}-scheduler"
    with (
        chart_rbac(kube, docs, folder),
        control_plane.trusting(account),
        release_policy_binding(kube, release),
    ):
        kubeconfig = service_account_kubeconfig(
            control_plane, namespace, f"{release}-scheduler", folder / "sa.kubeconfig"
        )
        args = harness_args(hami["args"], kubeconfig, drop=BOOTSTRAP_FLAGS)
        try:
            control_plane.restart_app(args, harness_env(hami, pod_name, namespace))
            yield args
        finally:
            control_plane.restart_app((), {})


def helm_env(control_plane: ControlPlane, folder: Path) -> dict[str, str]:
    return {
        **control_plane.env,
        "KUBECONFIG": str(control_plane.kubeconfig),
        "HELM_CACHE_HOME": str(folder / "cache"),
        "HELM_CONFIG_HOME": str(folder / "config"),
        "HELM_DATA_HOME": str(folder / "data"),
    }
