"""Scheduler replicas as the chart runs them: `hami serve` beside a kube-scheduler, one Lease.

Each :class:`Replica` is the pair of containers of one scheduler pod: a kube-scheduler with
leader election on (its Lease identity is ``<hostname>_<uuid>``, so each runs in a UTS namespace
of its own named after the replica, as each pod has its own hostname) and `hami serve` with
``--leader-elect --identity <replica>``, following that Lease. They serve the profile
``hami-ha``, so only pods naming it are theirs: the e2e plane's own scheduler pair keeps serving
``hami-scheduler`` beside them, and our webhook leaves pods naming another scheduler as they are.

:meth:`Replica.delete` stops the pair as the kubelet stops a deleted pod of the chart: SIGTERM to
kube-scheduler at once (it has no preStop hook, and releases the Lease on its way out), SIGTERM to
`hami serve` once its preStop sleep is over.
"""

from __future__ import annotations

import os
import signal
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
import yaml

from .cluster import ControlPlane, Process, component_tls, free_ports

LEASE_MANIFEST = """\
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {{name: hami-scheduler, namespace: {namespace}}}
spec: {{holderIdentity: {holder}, leaseDurationSeconds: 60, renewTime: "{now}"}}
"""


def lease(namespace: str, holder: str) -> str:
    """The scheduler's Lease in `namespace`, held by `holder` and renewed now."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000000Z")
    return LEASE_MANIFEST.format(namespace=namespace, holder=holder, now=now)


HA_SCHEDULER = "hami-ha"
LEASE = "hami-ha"


@dataclass
class Replica:
    name: str
    app: Process
    scheduler: Process
    extender_url: str
    metrics_url: str

    def delete(self, pre_stop: float) -> None:
        """Stop both containers as a pod deletion does (see the module docstring)."""
        os.killpg(self.scheduler.popen.pid, signal.SIGTERM)
        time.sleep(pre_stop)
        self.scheduler.stop()
        self.app.stop(grace=30)


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("scheduler replicas need root: each kube-scheduler gets a hostname of its own")


@contextmanager
def replicas(
    plane: ControlPlane, namespace: str, *names: str, app_args: tuple[str, ...] = ()
) -> Iterator[list[Replica]]:
    """Start the replicas in order (the first takes the Lease), stop all of them afterwards."""
    needs_root()
    started: list[Replica] = []
    try:
        for name in names:
            started.append(start_replica(plane, namespace, name, app_args))
            if len(started) == 1:
                wait_for_leader(plane, namespace, name)
        yield started
    finally:
        for replica in started:
            replica.scheduler.stop()
            replica.app.stop(grace=30)


def start_replica(
    plane: ControlPlane, namespace: str, name: str, app_args: tuple[str, ...] = ()
) -> Replica:
    port, extender, metrics, secure = free_ports(4)
    app = plane.spawn(
        f"replica-{name}.hami",
        [
            *plane.app_command(port, extender, metrics),
            "--scheduler-name", HA_SCHEDULER,
            "--leader-elect", "true",
            "--identity", name,
            "--leader-elect-resource-name", LEASE,
            "--leader-elect-resource-namespace", namespace,
            *app_args,
        ],
        env=plane.app_env(),
    )  # fmt: skip
    context = ssl.create_default_context(cafile=str(plane.app_tls.ca_file))
    plane.wait_http(app, f"https://127.0.0.1:{port}/readyz", context, timeout=60)
    extender_url = f"http://127.0.0.1:{extender}"
    configuration = plane.scheduler_configuration(extender_url, HA_SCHEDULER)
    configuration["leaderElection"] = {
        "leaderElect": True,
        "resourceLock": "leases",
        "resourceName": LEASE,
        "resourceNamespace": namespace,
    }
    config_file = plane.run_dir / f"replica-{name}.kube-scheduler.yaml"
    config_file.write_text(yaml.safe_dump(configuration, sort_keys=False))
    scheduler = plane.spawn(
        f"replica-{name}.kube-scheduler",
        [*plane.component_argv("kube-scheduler", secure), f"--config={config_file}", "--v=2"],
        hostname=name,
    )
    plane.wait_http(scheduler, f"https://127.0.0.1:{secure}/healthz", component_tls(), timeout=60)
    return Replica(name, app, scheduler, extender_url, f"http://127.0.0.1:{metrics}/metrics")


def lease_holder(plane: ControlPlane, namespace: str) -> str:
    result = plane.kubectl(
        "get", "lease", LEASE, "-n", namespace, "-o", "jsonpath={.spec.holderIdentity}",
        check=False,
    )  # fmt: skip
    return result.stdout.strip() if result.returncode == 0 else ""


def wait_for_leader(plane: ControlPlane, namespace: str, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not lease_holder(plane, namespace).startswith(name + "_"):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"replica {name} did not take the Lease within {timeout:g}s "
                f"(holder: {lease_holder(plane, namespace)!r})"
            )
        time.sleep(0.2)
