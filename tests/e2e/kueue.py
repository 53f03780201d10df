"""Kueue beside hami-py on the loopback control plane, as a HAMi user runs the two together.

Kueue's manager is built from its Go module (``kueuebin/build.sh``) and run outside any pod:

* its CRDs and webhooks come from the same module as the binary; the webhooks are registered
  with ``url: https://127.0.0.1:<port>/<path>`` and a CA issued here, so kube-apiserver calls
  them on loopback, and Kueue's own certificate management (which names a Service) is off;
* only the ``batch/job`` integration runs, so only the webhooks for Jobs and Kueue's own kinds
  are registered (the others, Pods included, would be answered by no handler);
* with its certificate management off, Kueue reads a metrics certificate from the fixed path
  ``/etc/kueue/metrics/certs``: it runs in a mount namespace of its own where the run folder's
  ``kueue/etc`` is bind-mounted over ``/etc``, so nothing is written to the machine's ``/etc``
  (root, or unprivileged user namespaces, is needed);
* Jobs need the job controller: kube-controller-manager runs with that one controller.

Its resource transformations are the ones docs/kueue.md shows (those of Kueue's "Using HAMi"
page), read from that page: ``nvidia.com/gpumem`` and ``nvidia.com/gpucores`` are per card, so
Kueue counts them times ``nvidia.com/gpu`` as ``nvidia.com/total-gpumem`` and
``nvidia.com/total-gpucores``.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from hami.certs.selfsigned import write_dev_bundle

from .cluster import (
    LOG_ROOT,
    REPO_ROOT,
    ControlPlane,
    Process,
    component_tls,
    free_ports,
    unavailable,
)
from .kube import wait_for

BUILD_SCRIPT = REPO_ROOT / "tests" / "e2e" / "kueuebin" / "build.sh"
# A cold build took 12 minutes on two loaded cores (tests/e2e/README.md).
BUILD_TIMEOUT = 3600.0
WEBHOOK_PREFIX = "kueue-"
# The API groups whose webhooks the batch/job integration serves.
SERVED_GROUPS = frozenset({"batch", "kueue.x-k8s.io"})
RECIPE = REPO_ROOT / "docs" / "kueue.md"


def documented(kind: str) -> dict[str, Any]:
    """The first object of `kind` in the YAML blocks of docs/kueue.md: the test runs the page's
    configuration and queues, not a copy of them."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", RECIPE.read_text(), flags=re.S | re.M)
    for block in blocks:
        for document in yaml.safe_load_all(block):
            if isinstance(document, dict) and document.get("kind") == kind:
                return document
    raise AssertionError(f"{RECIPE} shows no {kind}")


def ensure_kueue() -> Path:
    """Folder with the ``kueue`` binary, ``crds/`` and ``webhooks.yaml``, built on first use.

    Without a Go toolchain, or when the build fails, the test is skipped with the reason, unless
    ``E2E_REQUIRED=1``, where it fails. A build past the timeout is killed with its whole process
    group, so no orphaned ``go build`` keeps the build lock.
    """
    if shutil.which("go") is None:
        unavailable("no Go toolchain on PATH: the Kueue test builds Kueue with Go")
    LOG_ROOT.mkdir(parents=True, exist_ok=True)
    build_log = LOG_ROOT / "kueue-build.log"
    with build_log.open("w") as log:
        build = subprocess.Popen(
            ["bash", str(BUILD_SCRIPT)],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )
        try:
            out, _ = build.communicate(timeout=BUILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(build.pid, signal.SIGKILL)
            build.wait()
            unavailable(f"building Kueue took over {BUILD_TIMEOUT:g}s")
    if build.returncode != 0:
        unavailable(f"building Kueue failed (exit {build.returncode}); see {build_log}")
    folder = Path(out.strip().splitlines()[-1])
    if not os.access(folder / "kueue", os.X_OK):
        unavailable(f"{BUILD_SCRIPT} printed {folder}, which holds no kueue binary")
    return folder


@contextmanager
def running_kueue(plane: ControlPlane, built: Path) -> Iterator[None]:
    """Install Kueue's CRDs, start the job controller and Kueue, register Kueue's webhooks and
    wait until they suspend a queued Job; afterwards unregister them and stop both processes."""
    started: list[Process] = []
    registered: list[str] = []
    try:
        plane.kubectl("apply", "--server-side", "-f", str(built / "crds"), timeout=120)
        plane.kubectl("wait", "--for=condition=Established", "-f", str(built / "crds"))
        started.append(_start_job_controller(plane))
        folder = plane.run_dir / "kueue"
        webhook_tls = write_dev_bundle(folder / "webhook-tls", ["127.0.0.1"])
        # Read through the bind mount, at the path Kueue's binary fixes.
        write_dev_bundle(folder / "etc" / "kueue" / "metrics" / "certs", ["127.0.0.1"])
        health_port, webhook_port = free_ports(2)
        config = folder / "config.yaml"
        config.write_text(
            yaml.safe_dump(configuration(health_port, webhook_port, webhook_tls.cert_file.parent))
        )
        manager = plane.spawn(
            "kueue",
            [
                *_own_etc(folder / "etc"),
                str(built / "kueue"),
                f"--config={config}",
                "--zap-log-level=2",
            ],
            env={**plane.env, "KUBECONFIG": str(plane.kubeconfig)},
        )
        started.append(manager)
        plane.wait_http(manager, f"http://127.0.0.1:{health_port}/readyz", None, timeout=120)
        for manifest in webhook_manifests(
            (built / "webhooks.yaml").read_text(),
            f"https://127.0.0.1:{webhook_port}",
            webhook_tls.ca_file.read_bytes(),
        ):
            plane.kube.apply(json.dumps(manifest, indent=2))
            registered.append(f"{manifest['kind'].lower()}/{manifest['metadata']['name']}")
        _wait_for_job_webhook(plane)
        yield
    finally:
        # failurePolicy Fail: unregister before Kueue stops, or every later Job create fails.
        for name in registered:
            plane.kubectl("delete", name, "--ignore-not-found", check=False, timeout=30)
        for process in reversed(started):
            process.stop()


def configuration(health_port: int, webhook_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's configuration: the transformations of Kueue's HAMi page, everything on loopback,
    no leader election, no certificate management, no visibility server."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "leaderElection": {"leaderElect": False},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "internalCertManagement": {"enable": False},
        # Its API server would listen on every address; nothing here reads it.
        "featureGates": {"VisibilityOnDemand": False},
        "integrations": {"frameworks": ["batch/job"]},
        "resources": documented("Configuration")["resources"],
    }


def webhook_manifests(text: str, base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations with only the webhooks the batch/job integration serves,
    each called at ``base_url`` plus its path instead of through Kueue's Service."""
    manifests = []
    for document in yaml.safe_load_all(text):
        if not document:
            continue
        served = [w for w in document["webhooks"] if _groups(w) <= SERVED_GROUPS]
        for webhook in served:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {
                "url": f"{base_url}{path}",
                "caBundle": base64.b64encode(ca_pem).decode(),
            }
        document["metadata"]["name"] = WEBHOOK_PREFIX + document["metadata"]["name"]
        document["webhooks"] = served
        manifests.append(document)
    return manifests


def _groups(webhook: dict[str, Any]) -> set[str]:
    return {group for rule in webhook["rules"] for group in rule["apiGroups"]}


def _own_etc(etc: Path) -> list[str]:
    """The command prefix that runs the rest in a mount namespace with ``etc`` over /etc."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    script = 'mount --bind "$0" /etc && exec "$@"'
    return ["unshare", *user, "--mount", "--propagation", "private", "sh", "-c", script, str(etc)]


def _start_job_controller(plane: ControlPlane) -> Process:
    (port,) = free_ports(1)
    process = plane.spawn(
        "kube-controller-manager",
        [
            *plane.component_argv("kube-controller-manager", port),
            f"--kubeconfig={plane.kubeconfig}",
            "--leader-elect=false",
            "--controllers=job",
        ],
    )
    plane.wait_http(process, f"https://127.0.0.1:{port}/healthz", component_tls(), timeout=60)
    return process


def _wait_for_job_webhook(plane: ControlPlane) -> None:
    """kube-apiserver picks webhook configurations up through an informer: wait until a queued
    Job comes back suspended from a dry run before any test creates one."""
    probe = json.dumps(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "kueue-webhook-probe",
                "namespace": "default",
                "labels": {"kueue.x-k8s.io/queue-name": "probe"},
            },
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "probe", "image": "busybox"}],
                    }
                }
            },
        }
    )

    def suspended() -> bool:
        result = plane.kubectl(
            "create", "--dry-run=server", "-o", "json", "-f", "-", stdin=probe, check=False
        )
        return result.returncode == 0 and json.loads(result.stdout)["spec"].get("suspend") is True

    wait_for(suspended, timeout=30, what="Kueue's webhook to suspend a dry-run queued Job")
