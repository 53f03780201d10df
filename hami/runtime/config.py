"""Settings of `hami serve`, from flags, HAMI_* environment variables and a YAML file.

Precedence: flag, then environment, then file, then default. Everything is
validated once at start and a wrong value stops the process with a message
naming the setting, rather than surfacing later as a strange placement.
"""

import argparse
import os
import socket
import ssl
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from hami.certs.tls import ReloadingServerContext
from hami.engine.injection import InjectionConfig, InjectionError, driver_profile
from hami.engine.policy import PolicyError, parse_gpu_policy, parse_node_policy
from hami.files import UnreadableFileError, read_text
from hami.runtime.listeners import is_loopback
from hami.runtime.logs import FORMATS
from hami.runtime.pairprobe import check_url
from hami.service.bindrules import Budget, go_duration


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it."""


# A development pair, with the SANs Go's TLS checks against (docs/cli.md shows it).
DEV_PAIR_COMMAND = (
    "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 "
    "-subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 "
    "-keyout tls.key -out tls.crt"
)


def serving_context(cert_file: str, key_file: str) -> ReloadingServerContext:
    """The webhook's TLS, loaded now: a bad pair is a setting to fix, not a crash later."""
    try:
        return ReloadingServerContext(cert_file, key_file)
    except (ssl.SSLError, ValueError, OSError) as e:
        why = getattr(e, "reason", None) or getattr(e, "strerror", None) or str(e)
        raise ConfigError(
            f"--tls-cert-file {cert_file} and --tls-key-file {key_file} are not a PEM "
            f"certificate and its key ({why}); for a development pair run: {DEV_PAIR_COMMAND}"
        ) from None


@dataclass(frozen=True)
class Settings:
    kubeconfig: str = ""
    bind_address: str = "0.0.0.0"
    port: int = 9443
    tls_cert_file: str = ""
    tls_key_file: str = ""
    extender_bind_address: str = "127.0.0.1"
    extender_port: int = 9444
    metrics_bind_address: str = "127.0.0.1"
    metrics_port: int = 9395
    metrics_tls: bool = False
    metrics_pod_labels: bool = True
    read_timeout_seconds: float = 10.0
    keepalive_timeout_seconds: float = 120.0
    max_connections: int = 1024
    scheduler_name: str = "hami-scheduler"
    gpu_scheduler_policy: str = "spread"
    node_scheduler_policy: str = "binpack"
    force_overwrite_default_scheduler: bool = True
    overwrite_env: bool = True
    default_memory: int = 0
    default_cores: int = 0
    default_gpu_num: int = 1
    memory_factor: int = 1
    node_lock_expiry_seconds: float = 300.0
    node_lock_wait_seconds: float = 20.0
    reservation_ttl_seconds: float = 120.0
    watch_timeout_seconds: int = 60
    pair_healthz_url: str = ""
    admission_policy_binding: str = "hami-scheduling-state"
    allow_without_admission_policy: bool = False
    watch_lag_limit_seconds: float = 10.0
    requeue_rate: float = 100.0
    preemption: bool = False
    preemption_hold_seconds: float = 60.0
    events_per_second: float = 50.0
    success_events: bool = False
    kube_timeout_seconds: float = 10.0
    extender_http_timeout: str = "30s"
    bind_write_timeout_seconds: float = 5.0
    api_write_limit: int = 32
    leader_elect: bool = False
    leader_elect_resource_name: str = "hami-scheduler"
    leader_elect_resource_namespace: str = "kube-system"
    identity: str = ""
    shutdown_grace_seconds: float = 25.0
    node_integration: str = "hami-device-plugin"
    driver_profile: str = "none"
    driver_host_lib: str = ""
    driver_container_lib: str = ""
    hook_path: str = "/usr/local/vgpu"
    gfd_split_count: int = 0
    legacy_metrics: bool = False
    log_level: str = "info"
    logging_format: str = "text"
    cert_bootstrap_secret: str = ""
    cert_dir: str = ""
    webhook_configuration_name: str = ""
    service_name: str = ""
    service_namespace: str = ""


_HELP = {
    "kubeconfig": "kubeconfig file; in-cluster credentials when empty",
    "bind_address": "address of the HTTPS listener for /webhook, /healthz and /readyz",
    "port": "HTTPS port for /webhook, /healthz and /readyz",
    "extender_bind_address": (
        "loopback address of the plain HTTP listener for kube-scheduler's /filter and /bind "
        "(whoever reaches them can reserve cards, so nothing else may)"
    ),
    "extender_port": "port of /filter and /bind (and /healthz, /readyz)",
    "metrics_bind_address": "address of /metrics (the chart sets the pod IP)",
    "metrics_tls": "serve /metrics over HTTPS with the webhook's certificate",
    "metrics_pod_labels": (
        "publish the per-container series, which name every GPU pod's namespace and pod"
    ),
    "read_timeout_seconds": (
        "deadline for a new connection's TLS handshake and first request headers (from the "
        "accept), a later request's headers (from their first byte) and every body"
    ),
    "keepalive_timeout_seconds": (
        "how long a connection that has sent a request is kept open idle for the next; longer "
        "than the 90 s Go's HTTP clients keep idle connections (kube-apiserver's webhook "
        "client, kube-scheduler's extender client), so that they close them, not us: a "
        "POST sent on a connection the server is closing fails without a retry"
    ),
    "max_connections": (
        "open connections per listener at most (lowered to what the open-file limit holds); "
        "over it a new connection replaces the oldest that has sent no request, else the "
        'longest idle one. About 44 KiB each over TLS (docs/trust-boundary.md, "Bounded work")'
    ),
    "tls_cert_file": "serving certificate (PEM); reloaded when the file changes",
    "tls_key_file": "serving key (PEM)",
    "metrics_port": "port of Prometheus /metrics (plain HTTP unless --metrics-tls)",
    "scheduler_name": "schedulerName the webhook sets and the extender serves",
    "gpu_scheduler_policy": "default card policy: binpack, spread, numa, mutex, topology-aware or a chain",
    "node_scheduler_policy": "default node policy: binpack or spread",
    "force_overwrite_default_scheduler": "take GPU pods that name default-scheduler",
    "overwrite_env": (
        "write NVIDIA_VISIBLE_DEVICES=none into the containers of a GPU pod that ask for no GPU "
        "(HAMi's overwriteEnv), so that neither their image nor an envFrom can name cards"
    ),
    "default_memory": "MiB given to a container that asks for nvidia.com/gpu only (0: whole card)",
    "default_cores": "percent of SMs given when nvidia.com/gpucores is absent",
    "default_gpu_num": "nvidia.com/gpu set on containers that ask for memory or cores only",
    "memory_factor": "multiplier applied to nvidia.com/gpumem",
    "node_lock_expiry_seconds": "age after which another pod's node lock is taken over",
    "node_lock_wait_seconds": "how long a bind waits for another pod's node lock before failing (0: not at all)",
    "reservation_ttl_seconds": "how long a filter decision waits for its bind",
    "admission_policy_binding": (
        "the chart's ValidatingAdmissionPolicyBinding that lets only the scheduler and the "
        "device plugin write scheduling state; hami serve will not start without it"
    ),
    "allow_without_admission_policy": (
        "start even though that binding is missing (Kubernetes before 1.30, or the chart's "
        "admissionPolicy.enabled=false): a tenant who edits a running pod's allocation "
        "annotations then gets its cards handed out again after the next restart"
    ),
    "pair_healthz_url": (
        "the /healthz of the kube-scheduler beside this process (the chart sets "
        "https://127.0.0.1:10259/healthz): /healthz/pair answers ok only while it does, and is "
        "that kube-scheduler's liveness probe, so a hung hami serve also restarts the "
        "kube-scheduler holding the Lease and the other replica takes over (empty: this "
        "process alone)"
    ),
    "watch_timeout_seconds": (
        "how long one watch of pods, nodes or quotas runs before it is renewed; the API server "
        "sends a bookmark just before it ends, so each watch is in touch at least this often, "
        "and one silent for 1.5 times as long (plus the 5 s reconnect cap) makes filter and "
        "bind refuse and /readyz fail"
    ),
    "watch_lag_limit_seconds": (
        "filter and bind refuse, and /readyz fails, while a pod this process bound has waited "
        "longer than this for the pods watch to show it (the watch is stalled or far behind)"
    ),
    "events_per_second": (
        "Kubernetes Events posted a second at most (FilteringFailed, BindingFailed, ...); "
        "the rest are dropped and counted in hami_events_dropped (0: post none)"
    ),
    "success_events": (
        "post HAMi's FilteringSucceed and BindingSucceed Events for every placed pod: two "
        "writes per GPU pod that say what kube-scheduler's Scheduled Event and the pod's "
        "allocation annotations already say"
    ),
    "requeue_rate": (
        "pods a second at most that are touched (annotation hami.io/requeue) so kube-scheduler "
        "retries them once capacity they were refused for frees up (0: never)"
    ),
    "preemption": (
        "let a GPU pod that fits nowhere evict lower-priority GPU pods (Eviction API, so "
        "PodDisruptionBudgets hold) and take their cards; off: HAMi's behaviour"
    ),
    "preemption_hold_seconds": (
        "how long the cards a preemption frees stay held for the preemptor beyond the "
        "victims' termination grace period"
    ),
    "leader_elect": "follow the kube-scheduler Lease; only its holder serves filter and bind",
    "identity": "this replica's name in the Lease",
    "logging_format": "text (klog's, as Kubernetes components log) or json",
    "log_level": "debug, info, warning or error",
    "kube_timeout_seconds": "deadline of one API server call",
    "extender_http_timeout": (
        "kube-scheduler's extender httpTimeout as its configuration writes it (a Go duration; "
        "the chart passes scheduler.kubeScheduler.httpTimeout): every bind answers before it"
    ),
    "bind_write_timeout_seconds": (
        "how long one write of a bind (node lock, Binding) may take; a replica that has just "
        "become the leader waits this long before serving, for the last writes of the previous "
        "leader to land"
    ),
    "api_write_limit": (
        "API writes in flight at most; more wait their turn, Bindings first, then the node "
        "lock, then Events and the rest"
    ),
    "leader_elect_resource_name": "the kube-scheduler Lease followed with --leader-elect",
    "leader_elect_resource_namespace": "namespace of that Lease",
    "shutdown_grace_seconds": "on SIGTERM, how long binds under way may take to finish",
    "cert_bootstrap_secret": (
        "Secret keeping a CA and serving pair this process creates and rotates itself "
        "(empty: use --tls-cert-file and --tls-key-file as given)"
    ),
    "cert_dir": "folder the bootstrapped tls.crt, tls.key and ca.crt are written to and served from",
    "webhook_configuration_name": (
        "MutatingWebhookConfiguration whose caBundle the certificate bootstrap keeps current"
    ),
    "service_name": "Service in front of the webhook: the serving certificate's DNS names",
    "service_namespace": "namespace of that Service and of the certificate Secret",
    "node_integration": "hami-device-plugin (its Allocate injects libvgpu and limits) or standalone (we do)",
    "driver_profile": "driver libraries to mount into GPU containers: gke, generic or none",
    "driver_host_lib": "generic profile: the host folder holding libcuda.so.1",
    "driver_container_lib": "generic profile: where that folder appears in containers (added to LD_LIBRARY_PATH)",
    "legacy_metrics": "publish HAMi's metric names from before v2.9 (GPUDeviceMemoryAllocated, ...)",
    "hook_path": "standalone: host folder with libvgpu.so (GKE: /home/kubernetes/bin/nvidia/vgpu)",
    "gfd_split_count": (
        "standalone: register nodes without HAMi's device plugin from their GPU Feature Discovery "
        "labels (nvidia.com/gpu.count, .memory, .product) and allocatable nvidia.com/gpu, each "
        "card shared by this many tasks (0: off, such nodes stay unregistered)"
    ),
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _shown_default(name: str, value: object) -> str:
    if name == "identity":
        return "$POD_NAME, else the hostname"
    if isinstance(value, bool):
        return str(value).lower()
    return "none" if value == "" else str(value)


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    """One flag per setting. Flags default to None so that a setting not given on the command
    line falls through to the environment and the file; the help shows the real default."""
    p.add_argument("--config", help="YAML file with these settings (keys as flags, - or _)")
    for f in fields(Settings):
        kind = bool if f.type is bool or f.type == "bool" else None
        help_ = f"{_HELP[f.name]} (default: {_shown_default(f.name, f.default)}; env HAMI_{f.name.upper()})"
        if kind is bool:
            p.add_argument(
                _flag(f.name),
                dest=f.name,
                default=None,
                type=_parse_bool,
                metavar="BOOL",
                help=help_,
            )
        else:
            p.add_argument(_flag(f.name), dest=f.name, default=None, help=help_)


def _parse_bool(value: str) -> bool:
    v = str(value).strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not a boolean")


def _coerce(name: str, kind: type, value: Any, source: str) -> Any:
    try:
        if kind is bool:
            return value if isinstance(value, bool) else _parse_bool(str(value))
        if kind is int:
            if isinstance(value, bool):
                raise ValueError
            return int(value)
        if kind is float:
            return float(value)
        return str(value)
    except (ValueError, argparse.ArgumentTypeError):
        raise ConfigError(f"{source}: {name} must be {kind.__name__}, got {value!r}") from None


_TYPES = {"bool": bool, "int": int, "float": float, "str": str}


def load_settings(args: argparse.Namespace, env: dict[str, str] | None = None) -> Settings:
    env = dict(os.environ) if env is None else env
    file_values: dict[str, Any] = {}
    if getattr(args, "config", None):
        path = Path(args.config)
        try:
            raw = yaml.safe_load(read_text(path)) or {}
        except UnreadableFileError as e:
            raise ConfigError(f"config file {e}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {path}: {e}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"config file {path}: expected a mapping of settings")
        file_values = {str(k).replace("-", "_"): v for k, v in raw.items()}
        known = {f.name for f in fields(Settings)}
        unknown = sorted(set(file_values) - known)
        if unknown:
            raise ConfigError(f"config file {path}: unknown settings {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for f in fields(Settings):
        kind = _TYPES[f.type if isinstance(f.type, str) else f.type.__name__]
        env_name = "HAMI_" + f.name.upper()
        if getattr(args, f.name, None) is not None:
            values[f.name] = _coerce(f.name, kind, getattr(args, f.name), "flag " + _flag(f.name))
        elif env_name in env:
            values[f.name] = _coerce(f.name, kind, env[env_name], "environment " + env_name)
        elif f.name in file_values:
            values[f.name] = _coerce(f.name, kind, file_values[f.name], "config file")
    settings = Settings(**values)
    if not settings.identity:
        settings = Settings(**{**values, "identity": env.get("POD_NAME") or socket.gethostname()})
    validate(settings)
    return settings


def validate(s: Settings) -> None:
    try:
        parse_gpu_policy(s.gpu_scheduler_policy)
        parse_node_policy(s.node_scheduler_policy)
    except PolicyError as e:
        raise ConfigError(str(e)) from None
    if s.cert_bootstrap_secret:
        _validate_bootstrap(s)
    elif not s.tls_cert_file or not s.tls_key_file:
        raise ConfigError(
            "--tls-cert-file and --tls-key-file are required: kube-apiserver only calls webhooks "
            f"over HTTPS; for a development pair run: {DEV_PAIR_COMMAND}"
        )
    for name in ("tls_cert_file", "tls_key_file"):
        if not s.cert_bootstrap_secret and not Path(getattr(s, name)).is_file():
            raise ConfigError(f"{_flag(name)}: {getattr(s, name)} is not a readable file")
    ports = ("port", "extender_port", "metrics_port")
    for name in ports:
        if not 0 < getattr(s, name) < 65536:
            raise ConfigError(f"{_flag(name)} must be a TCP port, got {getattr(s, name)}")
    if len({getattr(s, name) for name in ports}) < len(ports):
        raise ConfigError("--port, --extender-port and --metrics-port must differ")
    if not is_loopback(s.extender_bind_address):
        raise ConfigError(
            f"--extender-bind-address must be a loopback address, got {s.extender_bind_address}: "
            "/filter and /bind are for the kube-scheduler beside this process only"
        )
    try:
        check_url(s.pair_healthz_url)
    except ValueError as e:
        raise ConfigError(f"--pair-healthz-url: {e}") from None
    if s.events_per_second < 0:
        raise ConfigError("--events-per-second must not be negative")
    if s.requeue_rate < 0:
        raise ConfigError("--requeue-rate must not be negative")
    if s.preemption_hold_seconds <= 0:
        raise ConfigError("--preemption-hold-seconds must be positive")
    for name in (
        "read_timeout_seconds",
        "keepalive_timeout_seconds",
        "kube_timeout_seconds",
        "bind_write_timeout_seconds",
        "watch_timeout_seconds",
        "watch_lag_limit_seconds",
    ):
        if getattr(s, name) <= 0:
            raise ConfigError(f"{_flag(name)} must be positive")
    if s.max_connections < 1:
        raise ConfigError("--max-connections must be at least 1")
    if s.api_write_limit < 1:
        raise ConfigError("--api-write-limit must be at least 1")
    try:
        bind_budget(s)
    except ValueError as e:
        raise ConfigError(f"--extender-http-timeout: {e}") from None
    for name in ("default_memory", "default_cores", "default_gpu_num"):
        if getattr(s, name) < 0:
            raise ConfigError(f"{_flag(name)} must not be negative")
    if s.node_lock_wait_seconds < 0:
        raise ConfigError("--node-lock-wait-seconds must not be negative")
    if s.memory_factor < 1:
        raise ConfigError("--memory-factor must be at least 1")
    if s.gfd_split_count < 0:
        raise ConfigError("--gfd-split-count must not be negative (0 switches it off)")
    if s.gfd_split_count and s.node_integration != "standalone":
        raise ConfigError(
            "--gfd-split-count needs --node-integration standalone: a node without HAMi's device "
            "plugin gets libvgpu.so and its limits from the webhook, nobody else"
        )
    try:
        injection_config(s)
    except InjectionError as e:
        raise ConfigError(str(e)) from None
    if s.logging_format not in FORMATS:
        raise ConfigError(
            f"--logging-format must be {' or '.join(FORMATS)}, got {s.logging_format!r}"
        )
    if s.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError("--log-level must be debug, info, warning or error")


def bind_budget(s: Settings) -> Budget:
    return Budget.within(go_duration(s.extender_http_timeout), s.bind_write_timeout_seconds)


def injection_config(s: Settings) -> InjectionConfig:
    return InjectionConfig(
        mode=s.node_integration,
        driver=driver_profile(s.driver_profile, s.driver_host_lib, s.driver_container_lib),
        hook_path=s.hook_path,
    )


def _validate_bootstrap(s: Settings) -> None:
    """The certificate bootstrap makes its own files: it needs where to put them and whom to name."""
    if s.tls_cert_file or s.tls_key_file:
        raise ConfigError(
            "--cert-bootstrap-secret serves the pair it writes into --cert-dir; "
            "drop --tls-cert-file and --tls-key-file"
        )
    for name in ("cert_dir", "service_name", "service_namespace"):
        if not getattr(s, name):
            raise ConfigError(f"--cert-bootstrap-secret needs {_flag(name)}")
