"""The chart's release on the node tier: `helm` as the README runs it, and what the tests read
off the scheduler pods (their logs, their /metrics on the pod IP, the Lease holder)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.e2e.cluster import CHART
from tests.e2e.invariant import card_usage
from tests.e2e.kube import Obj, wait_for
from tests.e2e.prometheus import get

from .cluster import NodeCluster

RELEASE = "hami-py"
NAMESPACE = "hami-system"
DEPLOYMENT = f"{RELEASE}-scheduler"
LEASE = "hami-scheduler"  # scheduler.leaseName
METRICS_PORT = 9395  # scheduler.metricsPort
SCHEDULER_PODS = "app.kubernetes.io/component=hami-scheduler"
EXTENDER = "vgpu-scheduler-extender"  # the hami serve container


class Release:
    """`helm` against the tier's API server, with its own cache and config folders."""

    def __init__(self, cluster: NodeCluster, folder: Path) -> None:
        self.cluster = cluster
        self.kube = cluster.plane.kube
        self.env = {
            **cluster.plane.env,
            "KUBECONFIG": str(cluster.plane.kubeconfig),
            "HELM_CACHE_HOME": str(folder / "cache"),
            "HELM_CONFIG_HOME": str(folder / "config"),
            "HELM_DATA_HOME": str(folder / "data"),
        }

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.cluster.plane.bin_dir / "helm"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
            check=check,
        )

    def install(self, *values: str) -> None:
        self._apply("install", "--create-namespace", *values)

    def upgrade(self, *values: str) -> None:
        """`helm upgrade --reuse-values`, then wait until the scheduler pods have rolled."""
        self._apply("upgrade", "--reuse-values", *values)

    def _apply(self, verb: str, *args: str) -> None:
        """`helm VERB`, then wait until only the new scheduler pods are left: a replaced pod
        answers the webhook with the old settings until its preStop sleep ends, after
        `rollout status` has returned."""
        self.helm(verb, RELEASE, str(CHART), "--namespace", NAMESPACE, *args)
        self.kube(
            *("-n", NAMESPACE, "rollout", "status", f"deploy/{DEPLOYMENT}", "--timeout=180s"),
            timeout=190,
        )
        wait_for(
            lambda: not any(_leaving(p) for p in self._pods(SCHEDULER_PODS)),
            timeout=90,
            what="the replaced scheduler pods to terminate",
        )

    def installed(self) -> bool:
        return self.helm("status", RELEASE, "--namespace", NAMESPACE, check=False).returncode == 0

    def uninstall(self) -> None:
        """`helm uninstall`, then wait for the release's pods to finish terminating (helm's
        --wait covers the objects it deleted, not their pods' grace period)."""
        self.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")
        wait_for(
            lambda: not self._pods(f"app.kubernetes.io/instance={RELEASE}"),
            timeout=120,
            what="the release's pods to terminate",
        )

    # --- the scheduler pods --------------------------------------------------------------------

    def _pods(self, selector: str) -> list[Obj]:
        listed = self.kube("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "json")
        pods: list[Obj] = json.loads(listed.stdout)["items"]
        return pods

    def scheduler_pods(self) -> list[Obj]:
        """The scheduler pods that are not on their way out."""
        return [p for p in self._pods(SCHEDULER_PODS) if not _leaving(p)]

    def scheduler_logs(self) -> str:
        """The hami serve containers' logs, as `kubectl logs` shows them."""
        return "".join(self.extender_log(p["metadata"]["name"]) for p in self.scheduler_pods())

    def extender_log(self, pod: str) -> str:
        """One scheduler pod's hami serve log."""
        return self.kube("logs", "-n", NAMESPACE, pod, "-c", EXTENDER).stdout

    def leader(self) -> str | None:
        """The scheduler pod whose kube-scheduler holds the Lease (its identity is
        ``<pod>_<uuid>``)."""
        holder = self.kube.get("lease", LEASE, NAMESPACE)["spec"].get("holderIdentity")
        return holder.split("_")[0] if holder else None

    def delete_leader(self) -> str:
        """Take the leading scheduler pod away, without waiting; returns its name."""
        leader = self.leader()
        assert leader is not None, "no scheduler pod holds the Lease"
        self.kube("delete", "pod", "-n", NAMESPACE, leader, "--wait=false")
        return leader

    def hand_over(self) -> None:
        """Delete the leader and wait until another replica holds the Lease."""
        gone = self.delete_leader()
        wait_for(
            lambda: self.leader() not in (gone, None),
            timeout=90,
            what=f"another scheduler pod to take the Lease from {gone}",
        )

    def shared_counts(self, pod: Obj) -> dict[str, float]:
        """How many pods share each card, from the pod's /metrics on its pod IP."""
        body = get(f"http://{pod['status']['podIP']}:{METRICS_PORT}/metrics").decode()
        return {uuid: float(usage.used) for uuid, usage in card_usage(body).items()}


def _leaving(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))
