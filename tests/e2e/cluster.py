"""A real control plane around our app, on loopback, for e2e tests.

:class:`ControlPlane` runs etcd, kube-apiserver, our ``hami serve`` process and kube-scheduler,
wired together the way the Helm chart wires them in a cluster: the apiserver calls our mutating
webhook, kube-scheduler calls our /filter and /bind. Only the node side is simulated
(:mod:`tests.e2e.nodesim`). Binaries come from :func:`ensure_binaries`.

Every process writes to its own log file in a per-run folder, ``tests/e2e/_logs/<timestamp>/``,
together with the PKI, kubeconfig, configs and manifests of that run, so a failed run can be
inspected (or driven by hand with ``kubectl --kubeconfig <run>/admin.kubeconfig``) afterwards.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import datetime as dt
import functools
import json
import os
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from hami.certs.selfsigned import issue_ca, issue_client, issue_serving, write_dev_bundle
from tests import tier
from tests.builders import FAMILIES

from . import faultproxy, loopback
from .kube import Kube, wait_for
from .nodesim import READY_MARKER
from .nodespec import NodeSpec, dump_specs

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "tests" / "e2e" / "k8sbins" / "build.sh"
LOG_ROOT = REPO_ROOT / "tests" / "e2e" / "_logs"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kubectl", "prometheus", "promtool")

SCHEDULER_NAME = "hami-scheduler"
# The chart's ValidatingAdmissionPolicy, as `helm install hami ./helm/hami -n hami-system`
# renders it, lets only these two users write scheduling state. Our process and the node
# simulator run as them (client certificates with these names), everything else as admin.
RELEASE_NAMESPACE = "hami-system"
SCHEDULER_USER = f"system:serviceaccount:{RELEASE_NAMESPACE}:hami-scheduler"
DEVICE_PLUGIN_USER = f"system:serviceaccount:{RELEASE_NAMESPACE}:hami-device-plugin"
# kubectl flags that act as the scheduler (admin impersonating it), for tests that fake what a
# bind would have written.
AS_SCHEDULER = (f"--as={SCHEDULER_USER}", "--as-group=system:masters")
# ... and as the device plugin.
AS_PLUGIN = (f"--as={DEVICE_PLUGIN_USER}", "--as-group=system:masters")
CHART = REPO_ROOT / "helm" / "hami"
KUBE_VERSION = "v1.36.3"  # tests/e2e/k8sbins/go.mod
WEBHOOK_CONFIGURATION = "hami-webhook"
ADMISSION_POLICY = "hami-scheduling-state"  # as release hami renders it
WEBHOOK_NAME = "vgpu.hami.io"
UPDATE_CONDITION = "updates-that-change-annotations"  # helm/hami/templates/webhook.yaml
RENAMED_DCU = ("example.com/dcu", "example.com/dcu-mem", "example.com/dcu-cores")
MANAGED_RESOURCES = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/priority",
    # Every other device family's, as the chart lists them (helm/hami/families.yaml).
    *FAMILIES.other_resource_names(),
    # Hygon's, as tests/e2e/test_device_config.py's device config renames them (the chart
    # adds the names a device-config override gives, helm/hami/templates/_helpers.tpl).
    *RENAMED_DCU,
)

# A cold build of the Kubernetes binaries takes 15-30 minutes on two cores.
BUILD_TIMEOUT = 3600.0
STOP_GRACE = 10.0
KEEP_RUNS = 20


class ControlPlaneError(RuntimeError):
    """A component failed to start or stop; the message ends with the relevant log tail."""


def ensure_binaries() -> Path:
    """Folder holding etcd, kube-apiserver, kube-scheduler and kubectl, built on first use.

    ``HAMI_E2E_BIN_DIR`` points at prebuilt binaries instead. Without a Go toolchain, or when the
    build fails, e2e tests are skipped with the reason, unless ``E2E_REQUIRED=1`` (CI), where
    they fail.
    """
    tier.refuse_outside_e2e("needs the Kubernetes binaries")
    prebuilt = os.environ.get("HAMI_E2E_BIN_DIR")
    if prebuilt:
        return _check_binaries(Path(prebuilt), "HAMI_E2E_BIN_DIR")
    if shutil.which("go") is None:
        unavailable("no Go toolchain on PATH: the e2e tests build kube-apiserver & co. with Go")
    return _check_binaries(build(BUILD_SCRIPT, BUILD_TIMEOUT), str(BUILD_SCRIPT))


def build(script: Path, timeout: float) -> Path:
    """Run build.sh (or a stand-in), return the folder it prints last.

    It runs in a session of its own, and past `timeout` (or on an interrupt) the whole group
    is ended, `go build` and its compilers with it: they hold build.sh's lock (its flock on fd 9),
    and killing bash alone left them building as orphans, every later caller waiting on them.
    """
    LOG_ROOT.mkdir(parents=True, exist_ok=True)
    build_log = LOG_ROOT / "k8sbins-build.log"
    with (
        build_log.open("w") as log,
        subprocess.Popen(
            ["bash", str(script)], stdout=subprocess.PIPE, stderr=log, start_new_session=True
        ) as popen,
    ):
        try:
            out, _ = popen.communicate(timeout=timeout)
        except BaseException as e:
            Process("the Kubernetes binaries' build", popen, build_log).stop()
            if isinstance(e, subprocess.TimeoutExpired):
                unavailable(f"building the Kubernetes binaries took over {timeout:g}s")
            raise
    if popen.returncode != 0:
        unavailable(
            f"building the Kubernetes binaries failed (exit {popen.returncode}); "
            f"{build_log}:\n{_tail(build_log)}"
        )
    return Path(out.decode().strip().splitlines()[-1])


def built_tool(name: str, override: str) -> Path:
    """One of the built binaries (helm, promtool) for tests that need no control plane: the
    path in the environment variable `override`, else the one build.sh builds (with Go on PATH
    or $HAMI_E2E_BIN_DIR), else `name` on PATH; without any, the test is skipped. Only for tests
    marked e2e, wherever the tool comes from: the fast tier runs none of them."""
    tier.refuse_outside_e2e(f"runs {name}")
    return _tool(name, override)


@functools.cache
def _tool(name: str, override: str) -> Path:
    explicit = os.environ.get(override)
    if explicit:
        return Path(explicit)
    if os.environ.get("HAMI_E2E_BIN_DIR") or shutil.which("go"):
        pinned = ensure_binaries() / name
        if pinned.is_file():
            return pinned
    found = shutil.which(name)
    if found:
        return Path(found)
    pytest.skip(f"no {name} binary: set {override}, or put Go or {name} on PATH")


def _check_binaries(folder: Path, origin: str) -> Path:
    missing = [b for b in BINARIES if not os.access(folder / b, os.X_OK)]
    if missing:
        unavailable(f"{origin}: {folder} lacks {', '.join(missing)}")
    return folder


def unavailable(reason: str) -> NoReturn:
    if os.environ.get("E2E_REQUIRED") == "1":
        pytest.fail(f"e2e tests required (E2E_REQUIRED=1) but {reason}", pytrace=False)
    pytest.skip(f"e2e tests skipped: {reason}")


@dataclass
class Process:
    """A child process in its own process group, logging to ``log``."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM the group, SIGKILL it after ``grace`` seconds, then make sure it is empty."""
        if self.alive():
            _signal_group(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                _signal_group(self.popen.pid, signal.SIGKILL)
                self.popen.wait(STOP_GRACE)
        # Anything the child started and left behind goes too.
        _signal_group(self.popen.pid, signal.SIGKILL)
        wait_for(
            lambda: not _group_exists(self.popen.pid),
            timeout=STOP_GRACE,
            what=f"process group of {self.name} to exit",
        )

    def fail(self, what: str) -> ControlPlaneError:
        state = (
            f"exited with code {self.popen.returncode}" if not self.alive() else "is still running"
        )
        return ControlPlaneError(f"{self.name} {state} {what}; {self.log}:\n{_tail(self.log)}")


@dataclass
class NodeSim:
    """A running :mod:`tests.e2e.nodesim` process and the nodes it plays."""

    nodes: tuple[NodeSpec, ...]
    process: Process
    stopped: bool = False

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def stop(self) -> None:
        """Stop the simulator (once: a test that stopped it leaves nothing for its fixture);
        raise if it had crashed while the test ran."""
        if self.stopped:
            return
        self.stopped = True
        crashed = not self.process.alive()
        self.process.stop()
        if crashed:
            raise self.process.fail("while the test ran")


@dataclass
class FaultyApi:
    """A :mod:`tests.e2e.faultproxy` in front of kube-apiserver, acting as our scheduler."""

    kubeconfig: Path  # for `hami serve --kubeconfig`: kube-apiserver through the proxy
    rules_file: Path
    process: Process
    _writes: int = 0

    def set(self, *rules: Mapping[str, object]) -> None:
        """Act on requests matching `rules` from now on (none: forward everything)."""
        tmp = self.rules_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(list(rules)))
        # A fresh mtime even within the file system's timestamp granularity.
        stamp = time.time() + self._writes
        os.utime(tmp, (stamp, stamp))
        tmp.replace(self.rules_file)
        self._writes += 1

    def acted(self, action: str = "") -> list[str]:
        """The proxy's log lines of what it did (``fault: <action> <method> <path>``)."""
        prefix = f"fault: {action}"
        lines = self.process.log.read_text(errors="replace").splitlines()
        return [line.split(" fault: ", 1)[1] for line in lines if f" {prefix}" in line]


class ControlPlane:
    """etcd, kube-apiserver, ``hami serve`` and kube-scheduler on free loopback ports.

    Use as a context manager; leaving it stops everything in reverse order and checks that no
    child process survived.
    """

    # Names in the API server's serving certificate.
    SERVING_HOSTS: tuple[str, ...] = ("127.0.0.1", "localhost")
    # Whether close() fails a run whose logs name a target off loopback (the node tier runs in
    # its own network namespace, where pod and Service addresses are expected).
    LOOPBACK_ONLY = True

    def __init__(
        self,
        bin_dir: Path,
        *,
        app_args: Sequence[str] = (),
        app_env: Mapping[str, str] | None = None,
        log_root: Path = LOG_ROOT,
        scheduler_client: tuple[float, int] | None = None,
    ) -> None:
        """`scheduler_client`: kube-scheduler's API client (qps, burst) instead of its defaults
        (50, 100), which cap how fast it binds any pod."""
        self.bin_dir = bin_dir
        self.scheduler_client = scheduler_client
        self.run_dir = _new_run_dir(log_root)
        self.kubeconfig = self.run_dir / "admin.kubeconfig"
        self.scheduler_kubeconfig = self.run_dir / "scheduler.kubeconfig"
        self.device_plugin_kubeconfig = self.run_dir / "device-plugin.kubeconfig"
        self._scheduler_users: tuple[str, ...] = ()
        self.timings: dict[str, float] = {}
        self._app_args = tuple(app_args)
        self._app_env = dict(app_env or {})
        self._app_starts = 0
        self._nodesims = 0
        self._processes: list[Process] = []
        self._etcd_data: Path | None = None
        self._policy_dropped = False  # drop_admission_policy() until apply_admission_policy()
        (
            self.etcd_port,
            self.etcd_peer_port,
            self.apiserver_port,
            self.app_port,
            self.extender_port,
            self.metrics_port,
            self.scheduler_port,
        ) = free_ports(7)
        self.apiserver_url = f"https://127.0.0.1:{self.apiserver_port}"
        self.app_url = f"https://127.0.0.1:{self.app_port}"
        # /filter and /bind: plain HTTP on loopback, as kube-scheduler reaches them in the pod.
        self.extender_url = f"http://127.0.0.1:{self.extender_port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        # Loopback traffic must never go through a proxy configured for the registries.
        self.env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1"}
        self.env.pop("KUBECONFIG", None)
        self.kube = Kube(bin_dir / "kubectl", self.kubeconfig, self.run_dir / "manifests", self.env)
        self._write_pki()

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _start(self) -> None:
        begin = time.monotonic()
        self._timed("etcd", self._start_etcd)
        self._timed("kube-apiserver", self._start_apiserver)
        self._timed("admission policy", self.apply_admission_policy)
        self._timed("hami serve", lambda: self.start_app(self._app_args, self._app_env))
        self._timed("webhook registration", self._register_webhook)
        self._timed("kube-scheduler", self._start_scheduler)
        self.timings["total"] = round(time.monotonic() - begin, 2)
        self.write_timings()

    def write_timings(self) -> None:
        """Seconds each start-up step took, into the run folder's timings.json."""
        (self.run_dir / "timings.json").write_text(json.dumps(self.timings, indent=2) + "\n")

    def close(self) -> None:
        """Stop everything: scheduler, webhook registration, simulators, app, apiserver, etcd."""
        errors: list[str] = []
        scheduler = [p for p in self._processes if p.name == "kube-scheduler"]
        apiserver = [p for p in self._processes if p.name == "kube-apiserver"]
        self._stop_all(scheduler, errors)
        if apiserver and apiserver[0].alive():
            # failurePolicy Fail: unregister before the webhook goes away, or every pod create in
            # a later run against this etcd would be refused.
            try:
                result = self.kubectl(
                    "delete",
                    "mutatingwebhookconfiguration",
                    WEBHOOK_CONFIGURATION,
                    "--ignore-not-found",
                    check=False,
                    timeout=30,
                )
                if result.returncode != 0:
                    errors.append(f"deleting the webhook configuration: {result.stderr.strip()}")
            except subprocess.TimeoutExpired:
                errors.append("deleting the webhook configuration timed out")
        others = [
            p
            for p in self._processes
            if p.name.startswith(("nodesim", "hami-serve", "faultproxy", "replica"))
        ]
        self._stop_all(others, errors)
        self._stop_all(apiserver, errors)
        self._stop_all([p for p in self._processes if p.name == "etcd"], errors)
        if self._etcd_data is not None:
            shutil.rmtree(self._etcd_data, ignore_errors=True)
        self._processes.clear()
        dials = loopback.scan(self.run_dir) if self.LOOPBACK_ONLY else []
        if dials:
            errors.append(
                "a component sent traffic off loopback, which no test may do:\n" + "\n".join(dials)
            )
        if errors:
            raise ControlPlaneError("; ".join(errors))

    def _stop_all(self, processes: Sequence[Process], errors: list[str]) -> None:
        for process in processes:
            # Keep going whatever happens to one: the others must still be stopped.
            try:
                process.stop()
            except (AssertionError, subprocess.TimeoutExpired) as e:
                errors.append(f"{process.name}: {e}")

    def _timed(self, step: str, action: Callable[[], None]) -> None:
        start = time.monotonic()
        action()
        self.timings[step] = round(time.monotonic() - start, 2)

    # --- our app -----------------------------------------------------------------------------

    @property
    def app(self) -> Process | None:
        running = [p for p in self._processes if p.name.startswith("hami-serve") and p.alive()]
        return running[-1] if running else None

    def start_app(
        self,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        nofile: tuple[int, int] | None = None,
    ) -> None:
        """Start ``hami serve`` with the contract flags plus ``extra_args``; wait for /readyz.
        ``nofile`` (soft, hard) is its RLIMIT_NOFILE, for this start only."""
        if self.app is not None:
            raise RuntimeError(f"{self.app.name} is already running")
        self._app_args = tuple(extra_args)
        self._app_env = dict(env or {})
        self._app_starts += 1
        argv = self.app_command(
            self.app_port, self.extender_port, self.metrics_port, self._app_args
        )
        env = self.app_env(self._app_env)
        process = self.spawn(
            f"hami-serve.{self._app_starts}", argv, cwd=self.run_dir, env=env, nofile=nofile
        )
        context = ssl.create_default_context(cafile=str(self.app_tls.ca_file))
        self.wait_http(process, f"{self.app_url}/readyz", context, timeout=60)

    def app_command(
        self, port: int, extender_port: int, metrics_port: int, extra_args: Sequence[str] = ()
    ) -> list[str]:
        """``hami serve`` with the contract flags on the given ports, plus ``extra_args``."""
        return [
            sys.executable,
            "-m",
            "hami",
            "serve",
            "--kubeconfig",
            str(self.scheduler_kubeconfig),
            "--bind-address",
            "127.0.0.1",
            "--port",
            str(port),
            "--extender-port",
            str(extender_port),
            "--tls-cert-file",
            str(self.app_tls.cert_file),
            "--tls-key-file",
            str(self.app_tls.key_file),
            "--metrics-port",
            str(metrics_port),
            "--scheduler-name",
            SCHEDULER_NAME,
            "--v=4",  # the chart's default, HAMi's: Lab 14's Step 8 reads the card score lines
            # Every family scheduled, as HAMi's scheduler was run to record our fixtures.
            "--enable-ascend=true",
            "--enable-iluvatar=true",
            # An administrator who dropped the policy accepted the risk (hami.runtime.preflight).
            *(["--allow-without-admission-policy=true"] if self._policy_dropped else []),
            *extra_args,
        ]

    def app_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        # Run from the run folder with the repository at the end of the path: the app imports
        # the project as installed, and a PYTHONPATH set by the caller still takes precedence.
        paths = [p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p]
        return {
            **self.env,
            "PYTHONPATH": os.pathsep.join([*paths, str(REPO_ROOT)]),
            "PYTHONUNBUFFERED": "1",
            **(extra or {}),
        }

    def stop_app(self) -> None:
        app = self.app
        if app is not None:
            app.stop()

    def restart_app(
        self,
        extra_args: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        nofile: tuple[int, int] | None = None,
    ) -> None:
        """Stop and start ``hami serve``; arguments default to those of the previous start."""
        self.stop_app()
        self.start_app(
            self._app_args if extra_args is None else extra_args,
            self._app_env if env is None else env,
            nofile,
        )

    @contextlib.contextmanager
    def scheduler_paused(self) -> Iterator[None]:
        """kube-scheduler frozen (SIGSTOP) until the block ends, as one that cannot reach the
        API server for a while: it neither retries a pod nor records a failure meanwhile."""
        (scheduler,) = [p for p in self._processes if p.name == "kube-scheduler" and p.alive()]
        _signal_group(scheduler.popen.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            _signal_group(scheduler.popen.pid, signal.SIGCONT)

    def crash_apiserver(self, down: float) -> None:
        """kube-apiserver killed (SIGKILL, as a crash) and started again on the same port
        after `down` seconds; returns once it is ready. Its clients (our process,
        kube-scheduler, the simulators) reconnect by themselves; etcd keeps everything."""
        (apiserver,) = [p for p in self._processes if p.name == "kube-apiserver" and p.alive()]
        _signal_group(apiserver.popen.pid, signal.SIGKILL)
        apiserver.popen.wait(STOP_GRACE)
        self._processes.remove(apiserver)
        time.sleep(down)
        self._start_apiserver()

    @property
    def app_log(self) -> Path:
        """Log of the latest ``hami serve`` process."""
        return self.run_dir / f"hami-serve.{self._app_starts}.log"

    # --- node simulators ---------------------------------------------------------------------

    def start_nodesim(self, nodes: Sequence[NodeSpec], timeout: float = 30) -> NodeSim:
        """Register ``nodes`` and play their kubelet and device plugin until stopped; fail if
        they are not all registered within ``timeout`` seconds."""
        self._nodesims += 1
        spec = self.run_dir / f"nodesim.{self._nodesims}.json"
        spec.write_text(dump_specs(nodes))
        argv = [
            sys.executable,
            "-m",
            "tests.e2e.nodesim",
            "--kubeconfig",
            str(self.device_plugin_kubeconfig),
            "--spec",
            str(spec),
        ]
        process = self.spawn(f"nodesim.{self._nodesims}", argv, cwd=REPO_ROOT, env=self.env)
        deadline = time.monotonic() + timeout
        while READY_MARKER not in process.log.read_text(errors="replace"):
            if not process.alive():
                raise process.fail("before registering its nodes")
            if time.monotonic() > deadline:
                process.stop()
                raise process.fail(f"did not register its nodes within {timeout:g}s")
            time.sleep(0.1)
        return NodeSim(tuple(nodes), process)

    def start_fault_proxy(self) -> FaultyApi:
        """A fault proxy acting as the scheduler's identity (the admission policy lets it write
        scheduling state); point `hami serve` at it with ``--kubeconfig faulty.kubeconfig``."""
        folder = self.run_dir / "faultproxy"
        folder.mkdir(exist_ok=True)
        config = yaml.safe_load(self.scheduler_kubeconfig.read_text())
        user = config["users"][0]["user"]
        (folder / "client.crt").write_bytes(base64.b64decode(user["client-certificate-data"]))
        (folder / "client.key").write_bytes(base64.b64decode(user["client-key-data"]))
        (folder / "client.key").chmod(0o600)
        tls = write_dev_bundle(folder / "tls", ["127.0.0.1"])
        (port,) = free_ports(1)
        rules = folder / "rules.json"
        rules.write_text("[]")
        process = self.spawn(
            "faultproxy",
            [
                sys.executable, "-m", "tests.e2e.faultproxy", "--port", str(port),
                "--upstream", self.apiserver_url, "--ca", str(self.pki / "ca.crt"),
                "--client-cert", str(folder / "client.crt"),
                "--client-key", str(folder / "client.key"),
                "--cert", str(tls.cert_file), "--key", str(tls.key_file), "--rules", str(rules),
            ],
            cwd=REPO_ROOT,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while faultproxy.READY_MARKER not in process.log.read_text(errors="replace"):
            if not process.alive() or time.monotonic() > deadline:
                process.stop()
                raise process.fail("before it was ready")
            time.sleep(0.1)
        config["clusters"][0]["cluster"] = {
            "server": f"https://127.0.0.1:{port}",
            "certificate-authority-data": _b64(tls.ca_file.read_bytes()),
        }
        kubeconfig = folder / "faulty.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        kubeconfig.chmod(0o600)
        return FaultyApi(kubeconfig, rules, process)

    def processes(self) -> list[Process]:
        """Every component started, live or not (benchmarks read their CPU time)."""
        return list(self._processes)

    # --- kubectl -----------------------------------------------------------------------------

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl as cluster admin."""
        return self.kube(*args, stdin=stdin, check=check, timeout=timeout)

    # --- diagnostics -------------------------------------------------------------------------

    def failure_report(self, lines: int = 40) -> str:
        """The run folder and the tail of every component log, for a failed test."""
        parts = [f"e2e run folder: {self.run_dir}"]
        for process in self._processes:
            state = "running" if process.alive() else f"exited {process.popen.returncode}"
            parts.append(
                f"--- {process.log.name} ({state}), last {lines} lines ---\n"
                f"{_tail(process.log, lines)}"
            )
        return "\n".join(parts)

    # --- startup steps -----------------------------------------------------------------------

    def _write_pki(self) -> None:
        pki = self.run_dir / "pki"
        pki.mkdir()
        ca = issue_ca("hami e2e cluster CA", days=2)
        serving = issue_serving(ca, list(self.SERVING_HOSTS), days=2)
        admin = issue_client(ca, "admin", ["system:masters"], days=2)
        identities = {
            self.kubeconfig: admin,
            # RBAC is the chart's own business (tests/e2e/test_helm.py); here only the names
            # matter, for the admission policy.
            self.scheduler_kubeconfig: issue_client(ca, SCHEDULER_USER, ["system:masters"], days=2),
            self.device_plugin_kubeconfig: issue_client(
                ca, DEVICE_PLUGIN_USER, ["system:masters"], days=2
            ),
        }
        files = {
            "ca.crt": ca.cert_pem,
            "apiserver.crt": serving.cert_pem,
            "apiserver.key": serving.key_pem,
            "admin.crt": admin.cert_pem,
            "admin.key": admin.key_pem,
        }
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        files["sa.key"] = sa_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        files["sa.pub"] = sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        for name, data in files.items():
            (pki / name).write_bytes(data)
        self.pki = pki
        for path, client in identities.items():
            path.write_text(yaml.safe_dump(self._kubeconfig(ca.cert_pem, client), sort_keys=False))
            path.chmod(0o600)
        # The webhook and extender get their own CA, as with the chart's certificate job.
        self.app_tls = write_dev_bundle(self.run_dir / "app-tls", ["127.0.0.1", "localhost"])

    def _kubeconfig(self, ca_pem: bytes, client: Any) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {
                        "server": self.apiserver_url,
                        "certificate-authority-data": _b64(ca_pem),
                    },
                }
            ],
            "users": [
                {
                    "name": "user",
                    "user": {
                        "client-certificate-data": _b64(client.cert_pem),
                        "client-key-data": _b64(client.key_pem),
                    },
                }
            ],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "user"}}],
            "current-context": "e2e",
        }

    def render_chart(self, template: str, *values: str) -> str:
        """One template of the chart as a release `hami` in hami-system renders it."""
        return subprocess.run(
            [
                str(self.bin_dir / "helm"),
                "template",
                "hami",
                str(CHART),
                "--namespace",
                RELEASE_NAMESPACE,
                # The chart asks for a kubeVersion helm cannot learn offline.
                "--kube-version",
                KUBE_VERSION,
                "--show-only",
                template,
                *values,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout

    def apply_admission_policy(self, *scheduler_users: str) -> None:
        """Install the chart's ValidatingAdmissionPolicy as a release in hami-system renders it,
        with `scheduler_users` trusted besides SCHEDULER_USER, and wait until it is enforced."""
        self._scheduler_users = tuple(scheduler_users)
        self._policy_dropped = False
        rendered = self.render_chart(
            "templates/admission-policy.yaml",
            "--set-json",
            f"admissionPolicy.schedulerUsers={json.dumps(list(scheduler_users))}",
        )
        self.kube.apply(rendered)

        def enforced() -> bool:
            refused = self._create_locked_node()
            return (
                refused.returncode != 0
                and "scheduling state" in refused.stderr
                and all(
                    self._create_locked_node(f"--as={u}", "--as-group=system:masters").returncode
                    == 0
                    for u in (SCHEDULER_USER, *scheduler_users)
                )
            )

        wait_for(enforced, timeout=30, what="the admission policy to be enforced as rendered")

    def drop_admission_policy(self) -> None:
        """Remove the policy's binding, as on a cluster older than 1.30 or with
        admissionPolicy.enabled=false, and wait until kube-apiserver no longer enforces it.
        apply_admission_policy() puts it back."""
        self.kubectl(
            "delete", "validatingadmissionpolicybinding", ADMISSION_POLICY, "--ignore-not-found"
        )
        self._policy_dropped = True
        wait_for(
            lambda: self._create_locked_node().returncode == 0,
            timeout=30,
            what="the admission policy to stop being enforced",
        )

    def _create_locked_node(self, *user: str) -> subprocess.CompletedProcess[str]:
        """A dry-run create of a Node carrying a node lock: a Node never reaches our webhook,
        so its answer is the policy's alone."""
        probe = json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": "hami-policy-probe",
                    "annotations": {"hami.io/mutex.lock": "2026-01-01T00:00:00Z,ns,probe"},
                },
            }
        )
        return self.kubectl(
            "create", "--dry-run=server", *user, "-f", "-", stdin=probe, check=False
        )

    @contextlib.contextmanager
    def trusting(self, *scheduler_users: str) -> Iterator[None]:
        """Let more users write scheduling state for a while (a scheduler run as the chart's own
        ServiceAccount of another release, in tests/e2e/test_helm.py)."""
        before = self._scheduler_users
        self.apply_admission_policy(*before, *scheduler_users)
        try:
            yield
        finally:
            self.apply_admission_policy(*before)

    def _start_etcd(self) -> None:
        self._etcd_data = _etcd_data_dir()
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        process = self.spawn(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                f"--data-dir={self._etcd_data}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self.wait_http(process, f"{client}/health", None, timeout=30)

    def _start_apiserver(self) -> None:
        pki = self.pki
        process = self.spawn("kube-apiserver", self._apiserver_argv())
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        self.wait_http(process, f"{self.apiserver_url}/readyz", context, timeout=120)

    def _apiserver_argv(self) -> list[str]:
        pki = self.pki
        return [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            # No ServiceAccount token controller runs, and nothing would ever lift the
            # not-ready taint that TaintNodesByCondition puts on every new Node.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--endpoint-reconciler-type=none",
            # kubectl logs/exec of a pod on a simulated node: dial the node's InternalIP
            # (127.0.0.1), never look its name up (the Hostname type, first by default, asks the
            # machine's DNS resolver).
            "--kubelet-preferred-address-types=InternalIP",
            f"--service-account-issuer={self.apiserver_url}/",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
        ]

    def _register_webhook(self) -> None:
        configuration = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": WEBHOOK_CONFIGURATION},
            "webhooks": [
                {
                    "name": WEBHOOK_NAME,
                    "clientConfig": {
                        "url": f"{self.app_url}/webhook",
                        "caBundle": _b64(self.app_tls.ca_file.read_bytes()),
                    },
                    "admissionReviewVersions": ["v1", "v1beta1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 10,
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                            "scope": "*",
                        },
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["UPDATE"],
                            "resources": ["pods/ephemeralcontainers"],
                            "scope": "*",
                        },
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["UPDATE"],
                            "resources": ["pods", "pods/status"],
                            "scope": "*",
                        },
                    ],
                    "matchConditions": self.harness_match_conditions(),
                    "namespaceSelector": {
                        "matchExpressions": [
                            _not_in("hami.io/webhook", "ignore"),
                            _not_in("kubernetes.io/metadata.name", "kube-system"),
                        ]
                    },
                    # No objectSelector, as in the chart: a pod's own ignore label spares it the
                    # mutation inside the webhook, never the checks.
                }
            ],
        }
        self.kube.apply(json.dumps(configuration, indent=2))
        # The apiserver picks webhook configurations up through an informer: wait until a GPU pod
        # actually comes back mutated before letting any test create one.
        probe = json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "hami-webhook-probe", "namespace": "default"},
                "spec": {
                    "containers": [
                        {
                            "name": "probe",
                            "image": "busybox",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ]
                },
            }
        )

        def mutated() -> bool:
            result = self.kubectl(
                "create", "--dry-run=server", "-o", "json", "-f", "-", stdin=probe, check=False
            )
            return (
                result.returncode == 0
                and json.loads(result.stdout)["spec"].get("schedulerName") == SCHEDULER_NAME
            )

        wait_for(mutated, timeout=30, what="the webhook to set schedulerName on a dry-run GPU pod")

    def harness_match_conditions(self) -> list[dict[str, Any]]:
        """The chart's condition on updates alone (only those that add or change an annotation
        reach the webhook), without its condition on GPU pods: every pod created reaches the
        webhook, as on clusters and installers without the chart's matchConditions, while the
        status updates of every test's pods never wait on it (a test may stop our process)."""
        rendered = yaml.safe_load(self.render_chart("templates/webhook.yaml"))
        conditions: list[dict[str, Any]] = rendered["webhooks"][0]["matchConditions"]
        return [c for c in conditions if c["name"] == UPDATE_CONDITION]

    def set_match_conditions(self, conditions: Sequence[Mapping[str, Any]]) -> None:
        """Replace the e2e webhook's matchConditions (none at all with an empty list)."""
        patch = [
            {"op": "add", "path": "/webhooks/0/matchConditions", "value": list(conditions)}
            if conditions
            else {"op": "remove", "path": "/webhooks/0/matchConditions"}
        ]
        current = self.kube.get("mutatingwebhookconfiguration", WEBHOOK_CONFIGURATION)
        if not conditions and "matchConditions" not in current["webhooks"][0]:
            return
        self.kubectl(
            "patch",
            "mutatingwebhookconfiguration",
            WEBHOOK_CONFIGURATION,
            "--type=json",
            "-p",
            json.dumps(patch),
        )

    def scheduler_configuration(
        self, extender_url: str, scheduler_name: str = SCHEDULER_NAME
    ) -> dict[str, Any]:
        """kube-scheduler's configuration as the chart writes it, with our extender at
        ``extender_url`` and short back-offs (tests wait for retries)."""
        return {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig)},
            "leaderElection": {"leaderElect": False},
            "podInitialBackoffSeconds": 1,
            "podMaxBackoffSeconds": 2,
            "profiles": [{"schedulerName": scheduler_name}],
            "extenders": [
                {
                    "urlPrefix": extender_url,
                    "filterVerb": "filter",
                    "bindVerb": "bind",
                    "enableHTTPS": False,
                    "nodeCacheCapable": True,
                    "weight": 1,
                    "httpTimeout": "30s",
                    "ignorable": False,
                    "managedResources": [
                        {"name": name, "ignoredByScheduler": True} for name in MANAGED_RESOURCES
                    ],
                }
            ],
        }

    def _start_scheduler(self) -> None:
        configuration = self.scheduler_configuration(self.extender_url)
        if self.scheduler_client is not None:
            qps, burst = self.scheduler_client
            configuration["clientConnection"] |= {"qps": qps, "burst": burst}
        config_file = self.run_dir / "kube-scheduler.yaml"
        config_file.write_text(yaml.safe_dump(configuration, sort_keys=False))
        process = self.spawn(
            "kube-scheduler",
            # v=2 logs every binding, which is what one reads when a pod is not placed.
            [
                *self.component_argv("kube-scheduler", self.scheduler_port),
                f"--config={config_file}",
                # Its metrics (the throughput bench reads them) without a client certificate.
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                "--v=2",
            ],
        )
        self.wait_http(
            process,
            f"https://127.0.0.1:{self.scheduler_port}/healthz",
            component_tls(),
            timeout=60,
        )

    @contextlib.contextmanager
    def default_scheduler(self) -> Iterator[None]:
        """The cluster's own kube-scheduler beside ours for the block: profile
        `default-scheduler`, no extender (the chart's kube-scheduler is a second one, serving
        `hami-scheduler`)."""
        configuration = self.scheduler_configuration(self.extender_url, "default-scheduler")
        del configuration["extenders"]
        config_file = self.run_dir / "default-scheduler.yaml"
        config_file.write_text(yaml.safe_dump(configuration, sort_keys=False))
        (port,) = free_ports(1)
        process = self.spawn(
            "default-scheduler",
            [*self.component_argv("kube-scheduler", port), f"--config={config_file}", "--v=2"],
        )
        try:
            self.wait_http(
                process, f"https://127.0.0.1:{port}/healthz", component_tls(), timeout=60
            )
            yield
        finally:
            process.stop()

    def component_argv(self, binary: str, port: int) -> list[str]:
        """A control-plane component (kube-scheduler, kube-controller-manager) as admin,
        serving /healthz on a loopback ``port``."""
        return [
            str(self.bin_dir / binary),
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            # The apiserver runs without front-proxy (requestheader) CAs; looking them up
            # would only fill the log with errors.
            "--authentication-skip-lookup=true",
        ]

    # --- plumbing ----------------------------------------------------------------------------

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        hostname: str | None = None,
        nofile: tuple[int, int] | None = None,
    ) -> Process:
        """A component logging to ``<name>.log`` in the run folder, stopped with the plane;
        ``hostname`` runs it in a UTS namespace of its own under that name (root only), as
        kube-scheduler's Lease identity comes from its hostname; ``nofile`` sets its
        RLIMIT_NOFILE (soft, hard)."""
        preexec = _die_with_parent if hostname is None else _named(hostname)
        if nofile is not None:
            preexec = _limited(preexec, nofile)
        log = self.run_dir / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd or self.run_dir,
                env=dict(env or self.env),
                start_new_session=True,
                preexec_fn=preexec,
            )
        process = Process(name, popen, log)
        self._processes.append(process)
        return process

    def wait_http(
        self, process: Process, url: str, context: ssl.SSLContext | None, timeout: float
    ) -> None:
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )
        deadline = time.monotonic() + timeout
        last = "no answer"
        while True:
            if not process.alive():
                raise process.fail(f"while waiting for {url} ({last})")
            try:
                with opener.open(url, timeout=5) as response:
                    if response.status == 200:
                        return
                    last = f"HTTP {response.status}"
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}"
            except OSError as e:
                last = repr(e)
            if time.monotonic() > deadline:
                raise process.fail(f"and {url} was not healthy within {timeout:g}s ({last})")
            time.sleep(0.25)


def _not_in(key: str, value: str) -> dict[str, object]:
    return {"key": key, "operator": "NotIn", "values": [value]}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def component_tls() -> ssl.SSLContext:
    """For a control-plane component's /healthz: kube-scheduler and kube-controller-manager serve
    it with a self-signed certificate they generated themselves."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def free_ports(count: int) -> list[int]:
    # All sockets stay open until every port is chosen, so the ports are distinct.
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _new_run_dir(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    runs = sorted(p for p in root.iterdir() if p.is_dir())
    for old in runs[: max(0, len(runs) - KEEP_RUNS + 1)]:
        shutil.rmtree(old, ignore_errors=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    for attempt in range(100):
        run = root / (stamp if attempt == 0 else f"{stamp}.{attempt}")
        try:
            run.mkdir()
        except FileExistsError:
            continue
        return run
    raise ControlPlaneError(f"cannot create a run folder under {root}")


def _etcd_data_dir() -> Path:
    # tmpfs keeps etcd's writes off the disk; --unsafe-no-fsync makes them cheap anyway.
    shm = Path("/dev/shm")
    parent = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    # etcd preallocates over 100 MiB (RAM, on tmpfs) that a run killed with SIGKILL cannot free;
    # the next run removes data folders whose owning pytest process is gone.
    for stale in parent.glob("hami-e2e-etcd-*-*"):
        owner = stale.name.split("-")[3]
        if owner.isdigit() and not _pid_alive(int(owner)):
            shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"hami-e2e-etcd-{os.getpid()}-", dir=parent))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def _die_with_parent() -> None:
    """Runs in the child before exec: if pytest itself is killed, take the component along."""
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _limited(then: Callable[[], None], nofile: tuple[int, int]) -> Callable[[], None]:
    """Before exec: `then`, and the open-file limit `nofile` (soft, hard)."""

    def preexec() -> None:
        then()
        resource.setrlimit(resource.RLIMIT_NOFILE, nofile)

    return preexec


_CLONE_NEWUTS = 0x04000000


def _named(hostname: str) -> Callable[[], None]:
    """Before exec: a UTS namespace of the child's own, under `hostname`."""
    name = hostname.encode()

    def preexec() -> None:
        _die_with_parent()
        if _libc is None or _libc.unshare(_CLONE_NEWUTS) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUTS) failed (needs root)")
        if _libc.sethostname(name, len(name)) != 0:
            raise OSError(ctypes.get_errno(), "sethostname failed")

    return preexec
