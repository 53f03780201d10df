"""Settings of `hami serve`, from flags, HAMI_* environment variables and a YAML file.

Precedence: flag, then environment, then file, then default. Everything is
validated once at start and a wrong value stops the process with a message
naming the setting, rather than surfacing later as a strange placement.
"""

from dataclasses import dataclass
from pathlib import Path

from hami.engine.claims import GPU_DEVICE_CLASSES
from hami.engine.dra.config import DEFAULT_CLASSES_TEXT
from hami.engine.dra.device import DRA_SPLIT
from hami.engine.families.registry import Families
from hami.engine.injection import InjectionConfig, InjectionError, driver_profile
from hami.engine.policy import PolicyError, parse_gpu_policy, parse_node_policy
from hami.engine.requests import ResourceDefaults
from hami.runtime.bodies import MAX_BODY
from hami.runtime.deviceconfig import (
    GPU_CORE_POLICIES,
    DeviceConfig,
    DeviceConfigError,
    chart_device_config,
    gated_families,
    read_device_config,
)
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
    metrics_pod_series_limit: int = 10_000
    read_timeout_seconds: float = 10.0
    keepalive_timeout_seconds: float = 120.0
    max_connections: int = 1024
    request_body_budget_mib: int = 0
    memory_limit_mib: int = 0
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
    blind_give_up_seconds: float = 120.0
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
    pod_namespace: str = ""
    shutdown_grace_seconds: float = 25.0
    node_integration: str = "hami-device-plugin"
    driver_profile: str = "none"
    driver_host_lib: str = ""
    driver_container_lib: str = ""
    hook_path: str = "/usr/local/vgpu"
    gfd_split_count: int = 0
    device_config_file: str = ""
    gpu_core_policy: str = "default"
    dra_gpu_device_classes: str = ",".join(GPU_DEVICE_CLASSES)
    dra_mode: str = "off"
    dra_device_classes: str = DEFAULT_CLASSES_TEXT
    dra_bookkeeping: bool = True
    dra_split_count: int = DRA_SPLIT
    ascend_runtime_class_name: str = ""
    ascend_hami_vnpu_core: bool = False
    enable_ascend: bool = False
    enable_iluvatar: bool = False
    legacy_metrics: bool = False
    log_level: str = "info"
    v: int = 0
    logging_format: str = "text"
    cert_bootstrap_secret: str = ""
    cert_dir: str = ""
    webhook_configuration_name: str = ""
    service_name: str = ""
    service_namespace: str = ""


def flag_name(name: str) -> str:
    """The command-line flag of a setting's field."""
    return "--" + name.replace("_", "-")


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
            raise ConfigError(f"{flag_name(name)}: {getattr(s, name)} is not a readable file")
    ports = ("port", "extender_port", "metrics_port")
    for name in ports:
        if not 0 < getattr(s, name) < 65536:
            raise ConfigError(f"{flag_name(name)} must be a TCP port, got {getattr(s, name)}")
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
    if s.blind_give_up_seconds < 0:
        raise ConfigError("--blind-give-up-seconds must not be negative (0: never)")
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
            raise ConfigError(f"{flag_name(name)} must be positive")
    if s.max_connections < 1:
        raise ConfigError("--max-connections must be at least 1")
    if s.request_body_budget_mib and s.request_body_budget_mib < 2 * MAX_BODY // 2**20:
        raise ConfigError(
            f"--request-body-budget-mib must be at least {2 * MAX_BODY // 2**20}: twice the "
            f"{MAX_BODY // 2**20} MiB one request body may have"
        )
    if s.memory_limit_mib < 0:
        raise ConfigError("--memory-limit-mib must not be negative")
    if s.api_write_limit < 1:
        raise ConfigError("--api-write-limit must be at least 1")
    try:
        bind_budget(s)
    except ValueError as e:
        raise ConfigError(f"--extender-http-timeout: {e}") from None
    for name in ("default_memory", "default_cores", "default_gpu_num"):
        if getattr(s, name) < 0:
            raise ConfigError(f"{flag_name(name)} must not be negative")
    if s.node_lock_wait_seconds < 0:
        raise ConfigError("--node-lock-wait-seconds must not be negative")
    if s.memory_factor < 1:
        raise ConfigError("--memory-factor must be at least 1")
    validate_dra_split(s)
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
    if not 0 <= s.v <= 10:
        raise ConfigError(f"--v must be from 0 to 10 (klog's verbosity), got {s.v}")
    if s.gpu_core_policy not in GPU_CORE_POLICIES:
        raise ConfigError(
            f"--gpu-core-policy must be {', '.join(GPU_CORE_POLICIES)}, got {s.gpu_core_policy!r}"
        )
    device_config(s)


def device_config(s: Settings, *, nvidia_flags: bool = True) -> DeviceConfig:
    """The device families the process schedules: --device-config-file's, or the chart's
    defaults without one. With `nvidia_flags` (serve's), the file's NVIDIA defaults must be the
    settings' (--default-memory and the others)."""
    if not s.device_config_file:
        return chart_device_config(
            s.ascend_runtime_class_name, s.ascend_hami_vnpu_core, enabled_families(s)
        )
    for name in ("ascend_runtime_class_name", "ascend_hami_vnpu_core"):
        if getattr(s, name):
            # As in HAMi's chart, the override's vnpus section is the one read: say so
            # rather than apply one of the two.
            raise ConfigError(
                f"{flag_name(name)} sets the chart's default Ascend chips: with "
                "--device-config-file set vnpus.configs[].runtimeClassName and "
                "vnpus.hamiVnpuCore in the file instead"
            )
    try:
        config = read_device_config(
            s.device_config_file,
            resource_defaults(s) if nvidia_flags else None,
            enabled_families(s),
        )
    except DeviceConfigError as e:
        raise ConfigError(str(e)) from None
    if config.gpu_core_policy and s.gpu_core_policy not in ("default", config.gpu_core_policy):
        raise ConfigError(
            f"device config {s.device_config_file}: nvidia.gpuCorePolicy is "
            f"{config.gpu_core_policy!r}, but --gpu-core-policy is {s.gpu_core_policy!r}: "
            "set one of them"
        )
    return config


def validate_dra_split(s: Settings) -> None:
    """--dra-split-count, as serve and the commands that share it read it."""
    if s.dra_split_count < 1:
        raise ConfigError(
            "--dra-split-count must be at least 1: it is how many pods may share a card only a "
            "DRA driver publishes"
        )


def enabled_families(s: Settings) -> tuple[str, ...]:
    """The gated families --enable-ascend and --enable-iluvatar turn on, as HAMi's flags do."""
    return gated_families(ascend=s.enable_ascend, iluvatar=s.enable_iluvatar)


def device_classes(s: Settings, families: Families) -> tuple[str, ...]:
    """--dra-gpu-device-classes as a list (hami.engine.claims): the classes whose claims a GPU
    pod may not name. With --dra-bookkeeping, those whose claims it counts are not among them:
    such a claim holds cards the scheduler sees (hami.cache.dra). They are the whole-card
    classes of the configured families' DRA drivers (FamilyWire.dra_drivers: HAMi-DRA's,
    NVIDIA's, Hygon's), each named after its driver; NVIDIA's MIG and VFIO classes are not
    among them (a MIG device is not counted on its parent card, a VFIO device is no card)."""
    listed = tuple(c.strip() for c in s.dra_gpu_device_classes.split(",") if c.strip())
    if not s.dra_bookkeeping:
        return listed
    return tuple(c for c in listed if c not in families.dra_drivers)


def gpu_core_policy(s: Settings, devices: DeviceConfig) -> str:
    """NVIDIA's core policy: the device config's where it names one, else --gpu-core-policy."""
    return devices.gpu_core_policy or s.gpu_core_policy


def resource_defaults(s: Settings) -> ResourceDefaults:
    return ResourceDefaults(
        default_memory=s.default_memory,
        default_cores=s.default_cores,
        default_gpu_num=s.default_gpu_num,
        memory_factor=s.memory_factor,
    )


def body_budget_mib(s: Settings) -> int:
    """MiB of request bodies held at once: as given, else an eighth of the memory limit (64 at
    the chart's 512Mi), never below two bodies; 64 without a limit."""
    if s.request_body_budget_mib:
        return s.request_body_budget_mib
    if s.memory_limit_mib:
        return max(2 * MAX_BODY // 2**20, s.memory_limit_mib // 8)
    return 64


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
            raise ConfigError(f"--cert-bootstrap-secret needs {flag_name(name)}")
