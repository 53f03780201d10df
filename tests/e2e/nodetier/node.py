"""One real node: containerd, the kubelet and kube-proxy, inside the tier's network namespace.

containerd keeps its root and state in a scratch folder (removed afterwards), the kubelet its
root in the run folder, pods get addresses from Debian's bridge CNI plugin on ``hami0`` and
their cgroups live under a cgroup of this run. :meth:`Node.close` leaves nothing behind: it
stops the kubelet, kills every task and every process in the run's cgroups, removes the
containers, pod network namespaces, mounts, cgroups and pod log folders the run created.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from tests.e2e.cluster import ControlPlaneError, Process
from tests.e2e.kube import wait_for
from tests.e2e.nodetier.plane import BRIDGE, GATEWAY, POD_CIDR, SERVICE_CIDR, NodeControlPlane

CNI_BIN = Path("/usr/lib/cni")
PAUSE_IMAGE = "localhost/hami-e2e-pause:1"
CGROUPS = Path("/sys/fs/cgroup")
HOST_DIRS = (Path("/var/log/pods"), Path("/var/log/containers"), Path("/run/netns"))
# The kubelet's device-plugin folder is a constant of the API, not under --root-dir.
KUBELET_HOME = Path("/var/lib/kubelet")
DEVICE_PLUGINS = KUBELET_HOME / "device-plugins"
TOOLS = ("containerd", "ctr", "runc", "iptables", "ip")


class Node:
    def __init__(self, plane: NodeControlPlane, name: str) -> None:
        self.plane = plane
        self.name = name
        self.dir = plane.run_dir / "node"
        self.dir.mkdir()
        self.scratch = Path(tempfile.mkdtemp(prefix="hami-e2e-containerd-", dir="/var/tmp"))
        self.socket = self.scratch / "containerd.sock"
        self.root_dir = self.dir / "kubelet"
        self.cgroup = f"hami-e2e-{os.getpid()}"
        self.device_plugins = DEVICE_PLUGINS
        self._kubelet_home_existed = KUBELET_HOME.exists()
        # What the host folders the kubelet and containerd write to held before (None: absent).
        self._before = {d: set(_names(d)) if d.exists() else None for d in HOST_DIRS}
        self._processes: list[Process] = []

    # --- start -----------------------------------------------------------------------------

    def start(self, images: Sequence[Path]) -> None:
        missing = [t for t in TOOLS if shutil.which(t) is None]
        if missing:
            raise ControlPlaneError(
                f"the node tier needs {', '.join(missing)}: run scripts/check as root with "
                "HAMI_NODE_TIER=1 (it installs containerd, runc, iptables, buildah, ...)"
            )
        subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
        subprocess.run(["ip", "addr", "add", f"{GATEWAY}/16", "dev", BRIDGE], check=True)
        subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True)
        # The namespace has no default route: without this one, dialling a ClusterIP fails
        # before kube-proxy's DNAT rules are ever consulted.
        subprocess.run(["ip", "route", "add", SERVICE_CIDR, "dev", BRIDGE], check=True)
        for controller in _controllers():
            (controller / self.cgroup).mkdir(exist_ok=True)
            if controller.name == "cpuset":  # a v1 cpuset starts empty, refusing every task
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    (controller / self.cgroup / knob).write_text((controller / knob).read_text())
        self._start_containerd()
        for archive in images:
            self.ctr("images", "import", "--no-unpack", str(archive), timeout=300)
        self._start_kubelet()
        self._start_kube_proxy()

    def ctr(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "-a", str(self.socket), "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )

    def spawn(self, name: str, argv: list[str], cwd: Path | None = None) -> Process:
        """Start a process that belongs to the node: stopped before its containers go."""
        # Also in the plane's list, for its failure report; Node.close stops it first.
        process = self.plane.spawn(name, argv, cwd=cwd)
        self._processes.append(process)
        return process

    def _start_containerd(self) -> None:
        cni = self.dir / "cni"
        cni.mkdir()
        conflist = {
            "cniVersion": "0.4.0",
            "name": "hami-e2e",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR, "gateway": GATEWAY}]],
                        # Pods reach Services (the API server's included) through the gateway.
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.dir / "cni-ipam"),
                    },
                }
            ],
        }
        (cni / "10-hami-e2e.conflist").write_text(json.dumps(conflist, indent=2))
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = f"""version = 2
root = "{self.scratch}/root"
state = "{self.scratch}/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # The pause container asks for oom_score_adj -998, which needs CAP_SYS_RESOURCE.
  restrict_oom_score_adj = true
  [{cri}.containerd]
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni}"
"""
        (self.dir / "containerd.toml").write_text(config)
        process = self.spawn(
            "containerd", ["containerd", "--config", str(self.dir / "containerd.toml")]
        )

        def cri_status() -> str:
            if not process.alive():
                raise process.fail("while starting")
            plugins = subprocess.run(
                ["ctr", "-a", str(self.socket), "plugins", "ls"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            ).stdout
            # TYPE ID PLATFORMS STATUS, e.g. "io.containerd.grpc.v1  cri  linux/amd64  ok"
            rows = [line.split() for line in plugins.splitlines()]
            return next((r[-1] for r in rows if r[:2] == ["io.containerd.grpc.v1", "cri"]), "")

        status = wait_for(cri_status, timeout=30, what="containerd's CRI plugin")
        if status != "ok":
            raise process.fail(f"with its CRI plugin {status} (a config error; see its log)")

    def _kubeconfig(self) -> str:
        return str(self.plane.kubeconfig)

    def _start_kubelet(self) -> None:
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # This machine kind mounts cgroup v1; v1.35 refuses it unless told otherwise.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup}",
            "failSwapOn": False,
            "localStorageCapacityIsolation": False,
            "enforceNodeAllocatable": [],
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "healthzBindAddress": "127.0.0.1",
            # Imported images can never be pulled again: never collect them.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "1Mi"},
            "resolvConf": "",
            "serializeImagePulls": False,
        }
        (self.dir / "kubelet.yaml").write_text(yaml.safe_dump(config))
        process = self.spawn(
            "kubelet",
            [
                str(self.plane.bin_dir / "kubelet"),
                f"--config={self.dir / 'kubelet.yaml'}",
                f"--kubeconfig={self._kubeconfig()}",
                f"--root-dir={self.root_dir}",
                f"--cert-dir={self.root_dir / 'pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={GATEWAY}",
            ],
        )

        def ready() -> bool:
            if not process.alive():
                raise process.fail("before its node was Ready")
            result = self.plane.kubectl(
                "get",
                "node",
                self.name,
                "-o",
                "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                check=False,
            )
            return result.stdout.strip() == "True"

        wait_for(ready, timeout=90, interval=1, what=f"node {self.name} to be Ready")

    def _start_kube_proxy(self) -> None:
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": self._kubeconfig()},
            "hostnameOverride": self.name,
            "clusterCIDR": POD_CIDR,
            # nf_conntrack_max is not per namespace: leave the machine's setting alone.
            "conntrack": {"maxPerCore": 0, "min": 0},
            "metricsBindAddress": "127.0.0.1:10249",
            "healthzBindAddress": "127.0.0.1:10256",
        }
        (self.dir / "kube-proxy.yaml").write_text(yaml.safe_dump(config))
        process = self.spawn(
            "kube-proxy",
            [str(self.plane.bin_dir / "kube-proxy"), f"--config={self.dir / 'kube-proxy.yaml'}"],
        )
        self.plane.wait_http(process, "http://127.0.0.1:10256/healthz", None, timeout=60)

    # --- stop ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop everything and remove every trace; raise naming what could not be removed."""
        errors: list[str] = []
        for process in reversed([p for p in self._processes if p.name != "containerd"]):
            _keep_going(errors, process.stop)
        _keep_going(errors, self._remove_containers)
        for process in [p for p in self._processes if p.name == "containerd"]:
            _keep_going(errors, process.stop)
        _keep_going(errors, self._sweep_cgroups)
        _keep_going(errors, self._unmount)
        for folder, before in self._before.items():
            for name in set(_names(folder)) - (before or set()):
                path = folder / name
                if folder.name == "pods":  # keep the containers' logs with the run
                    _keep_going(
                        errors,
                        functools.partial(shutil.copytree, path, self.dir / "pod-logs" / name),
                    )
                if folder.name == "netns":
                    subprocess.run(["umount", str(path)], check=False, capture_output=True)
                _keep_going(errors, functools.partial(_remove, path))
            if before is None and folder.exists():
                _keep_going(errors, folder.rmdir)
        shutil.rmtree(self.scratch, ignore_errors=True)
        if not self._kubelet_home_existed:
            shutil.rmtree(KUBELET_HOME, ignore_errors=True)
        subprocess.run(["ip", "link", "del", BRIDGE], check=False, capture_output=True)
        if errors:
            raise ControlPlaneError("node tear-down: " + "; ".join(errors))

    def _remove_containers(self) -> None:
        if not self.socket.exists():
            return
        tasks = self.ctr("tasks", "ls", "-q").stdout.split()
        for task in tasks:  # a task may exit by itself meanwhile: no check
            self._ctr_quiet("tasks", "kill", "-s", "SIGKILL", task)
        for task in tasks:
            wait_for(
                functools.partial(self._task_stopped, task),
                timeout=20,
                what=f"task {task} to stop",
            )
            self._ctr_quiet("tasks", "delete", task)
        left = self.ctr("tasks", "ls", "-q").stdout.split()
        if left:
            raise ControlPlaneError(f"containerd tasks left after SIGKILL: {left}")
        containers = self.ctr("containers", "ls", "-q").stdout.split()
        if containers:
            self.ctr("containers", "delete", *containers, timeout=60)

    def _ctr_quiet(self, *args: str) -> None:
        subprocess.run(
            ["ctr", "-a", str(self.socket), "-n", "k8s.io", *args],
            capture_output=True,
            timeout=30,
            check=False,
        )

    def _task_stopped(self, task: str) -> bool:
        for line in self.ctr("tasks", "ls").stdout.splitlines():
            if line.split()[:1] == [task]:
                return "STOPPED" in line
        return True

    def _sweep_cgroups(self) -> None:
        for controller in [*_controllers(), CGROUPS / "unified"]:
            top = controller / self.cgroup
            if not top.exists():
                continue
            below = [p for p in top.rglob("*") if p.is_dir()]
            for cgroup in [*sorted(below, key=lambda p: -len(p.parts)), top]:
                procs = cgroup / "cgroup.procs"
                for pid in procs.read_text().split() if procs.exists() else []:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), 9)
                deadline = time.monotonic() + 10
                while True:
                    try:
                        cgroup.rmdir()
                        break
                    except OSError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.1)

    def _unmount(self) -> None:
        roots = (str(self.dir), str(self.scratch))
        mounts = [
            line.split()[4]
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(roots)
        ]
        for mount in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], check=True, capture_output=True)


def _controllers() -> list[Path]:
    # Every cgroup v1 hierarchy, the named systemd one included (the kubelet checks it too).
    return [
        p for p in CGROUPS.iterdir() if p.is_dir() and not p.is_symlink() and p.name != "unified"
    ]


def _names(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir()] if folder.is_dir() else []


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    else:
        shutil.rmtree(path)


def _keep_going(errors: list[str], action: Callable[[], object]) -> None:
    try:
        action()
    except Exception as e:  # every step of a tear-down must run
        errors.append(f"{getattr(action, '__name__', action)}: {e}")
