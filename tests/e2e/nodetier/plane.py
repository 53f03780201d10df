"""The control plane of the node tier: etcd, kube-apiserver and kube-controller-manager.

Unlike the loopback tier, no ``hami serve`` or kube-scheduler runs on the host: the chart
installs both as a pod. The API server is reachable from pods through the ``kubernetes``
Service (kube-proxy maps its ClusterIP to the bridge's gateway address, where the API server
also listens), Service accounts are admitted and kube-controller-manager runs the Deployment,
EndpointSlice, node lifecycle and service-account controllers. Everything lives in the network
namespace the caller entered (:mod:`tests.e2e.netns`).
"""

from __future__ import annotations

import json

from tests.e2e.cluster import ControlPlane, ControlPlaneError, component_tls, free_ports

BRIDGE = "hami0"
GATEWAY = "10.88.0.1"
POD_CIDR = "10.88.0.0/16"
SERVICE_CIDR = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"


class NodeControlPlane(ControlPlane):
    SERVING_HOSTS = (
        "127.0.0.1",
        "localhost",
        GATEWAY,
        KUBERNETES_SERVICE_IP,
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    )
    LOOPBACK_ONLY = False

    def _start(self) -> None:
        self._timed("etcd", self._start_etcd)
        self._timed("kube-apiserver", self._start_apiserver)
        self._timed("kube-controller-manager", self._start_controller_manager)
        self._timed("kube-scheduler", self._start_default_scheduler)

    def close(self) -> None:
        errors: list[str] = []
        mine = ("kube-controller-manager", "default-scheduler")
        self._stop_all([p for p in self._processes if p.name in mine], errors)
        super().close()
        if errors:
            raise ControlPlaneError("; ".join(errors))

    def _apiserver_argv(self) -> list[str]:
        keep = ("--disable-admission-plugins", "--endpoint-reconciler-type", "--bind-address")
        argv = [a for a in super()._apiserver_argv() if not a.startswith(keep)]
        argv = [
            a.replace("--advertise-address=127.0.0.1", f"--advertise-address={GATEWAY}")
            for a in argv
        ]
        # The kubelet serves logs and exec on the gateway address with a self-signed certificate.
        return [*argv, "--bind-address=0.0.0.0", "--kubelet-preferred-address-types=InternalIP"]

    def _start_default_scheduler(self) -> None:
        """The cluster's own default-scheduler, for every pod the chart's scheduler does not
        take (the chart's pods included)."""
        (port,) = free_ports(1)
        config_file = self.run_dir / "default-scheduler.yaml"
        configuration = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig)},
            "leaderElection": {"leaderElect": False},
        }
        config_file.write_text(json.dumps(configuration))
        argv = [*self.component_argv("kube-scheduler", port), f"--config={config_file}"]
        process = self.spawn("default-scheduler", argv)
        self.wait_http(process, f"https://127.0.0.1:{port}/healthz", component_tls(), timeout=60)

    def _start_controller_manager(self) -> None:
        (port,) = free_ports(1)
        pki = self.pki
        process = self.spawn(
            "kube-controller-manager",
            [
                *self.component_argv("kube-controller-manager", port),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # Node IPAM stays off: the bridge plugin's host-local range hands out pod IPs.
                "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller",
            ],
        )
        self.wait_http(process, f"https://127.0.0.1:{port}/healthz", component_tls(), timeout=60)
