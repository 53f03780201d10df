"""HAMi v2.10.0's own chart (tests/reference/hami-chart-v2.10.0, charts/hami of HAMi's tag
v2.10.0 as published, Apache-2.0, its README left out) installed on the real control plane as
Lab 14 installs it, and the Step 3 patch that removes its `vgpu-monitor` container.

Harness differences: the release gets a name of its own (`hami-<hex>`, so its cluster-wide
names never meet another test's or the harness's `hami-webhook`) in a namespace of its own
instead of `hami` in `kube-system`; `--no-hooks`, as nothing here runs the certificate Jobs (its
webhook then has no caBundle; its failurePolicy is Ignore); no kubelet or controller-manager
runs its pods, so its Deployment and DaemonSet stay as written. Its kube-scheduler's Lease,
which only a running kube-scheduler takes, is written by `hold_lease` as HAMi's would be."""

from __future__ import annotations

import datetime as dt
import json
import secrets
import shlex

import yaml

from tests.builders.chart import LAB14_STEP3, REPO_ROOT, helm

from .kube import Kube

HAMI_CHART = REPO_ROOT / "tests" / "reference" / "hami-chart-v2.10.0"
LAB14_MONITOR_PATCH = '[{"op":"remove","path":"/spec/template/spec/containers/1"}]'


def release_name() -> str:
    return f"hami-{secrets.token_hex(2)}"  # contains "hami": the chart's fullname is the name


def install_as_lab14(release: str, namespace: str, env: dict[str, str], *sets: str) -> None:
    """Lab 14's Step 3 `helm install` line, values verbatim, plus `sets`; then Step 3's patch."""
    argv = shlex.split(LAB14_STEP3.replace("\\\n", " "))
    assert argv[:4] == ["helm", "install", "hami", "hami-charts/hami"], argv
    assert argv[4:8] == ["-n", "kube-system", "--version", "2.10.0"], argv
    extra = [a for value in sets for a in ("--set", value)]
    install = ["install", release, str(HAMI_CHART), "-n", namespace, *argv[8:], *extra]
    helm(*install, "--no-hooks", env=env)


def patch_out_monitor(kube: Kube, release: str, namespace: str) -> None:
    """Lab 14's Step 3 `kubectl patch ds hami-device-plugin`, for this release's name."""
    ds = f"{release}-device-plugin"
    containers = kube.get("ds", ds, namespace)["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["device-plugin", "vgpu-monitor"]
    kube("-n", namespace, "patch", "ds", ds, "--type=json", "-p", LAB14_MONITOR_PATCH)


def hold_lease(kube: Kube, namespace: str, holder: str, name: str = "hami-scheduler") -> None:
    """The Lease HAMi's kube-scheduler takes (its schedulerName, in its namespace), held by
    `holder` as kube-scheduler writes it."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "holderIdentity": f"{holder}_{secrets.token_hex(4)}",
            "leaseDurationSeconds": 15,
            "acquireTime": now,
            "renewTime": now,
        },
    }
    kube.apply(json.dumps(lease), namespace)


def manifest_objects(release: str, namespace: str, env: dict[str, str]) -> list[tuple[str, str]]:
    """(kind, name) of every object of the release, as `helm get manifest` lists them."""
    text = helm("get", "manifest", release, "-n", namespace, env=env).stdout
    return [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(text) if d]


def remove(kube: Kube, release: str, namespace: str, env: dict[str, str]) -> None:
    """The release and its Lease: a held Lease named as the chart's schedulerName refuses a
    later plain install of ours (helm/hami/templates/hami-check.yaml)."""
    helm("uninstall", release, "-n", namespace, "--ignore-not-found", env=env)
    kube("-n", namespace, "delete", "lease", "--all")
