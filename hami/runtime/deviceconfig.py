"""HAMi's device-config.yaml (its chart's `hami-scheduler-device` ConfigMap), read by
`hami serve --device-config-file` as HAMi's scheduler reads `--device-config-file`, and by
`hami simulate`, `hami explain` and `hami status` with the same flags (hami.runtime.choices).

The file is taken as it is: every section HAMi reads is read (hami.engine.families.registry
builds each family from its own), a value HAMi could not decode stops the process naming
its section and field, and what HAMi ignores is reported. The families built are the ones
the process schedules: the cache, the webhook, the extender, the quotas and the metrics all
get this one instance. NVIDIA's resource names are fixed (the chart's kube-scheduler and
webhook configuration name them), so a file that renames them, or sets NVIDIA's defaults
other than serve's flags do, is refused rather than half applied.
"""

import argparse
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hami.engine.dra.config import DEFAULT_CLASSES_TEXT
from hami.engine.dra.device import DRA_SPLIT
from hami.engine.families import ascend
from hami.engine.families.registry import GATED, Families, configured, from_device_config
from hami.engine.requests import ResourceDefaults
from hami.files import UnreadableFileError, read_text
from hami.runtime.settings_help import HELP

# The `nvidia:` keys that name what serve reads from its own flags: key -> (flag, attribute
# of ResourceDefaults or of its names).
_NVIDIA = {
    "resourceCountName": ("", "gpu"),
    "resourceMemoryName": ("", "memory"),
    "resourceMemoryPercentageName": ("", "memory_percentage"),
    "resourceCoreName": ("", "cores"),
    "resourcePriorityName": ("", "priority"),
    "defaultMemory": ("--default-memory", "default_memory"),
    "defaultCores": ("--default-cores", "default_cores"),
    "defaultGPUNum": ("--default-gpu-num", "default_gpu_num"),
    "memoryFactor": ("--memory-factor", "memory_factor"),
}


# HAMi's GPUCoreUtilizationPolicy values (pkg/device/nvidia): what libvgpu.so reads.
GPU_CORE_POLICIES = ("default", "force", "disable")


class DeviceConfigError(ValueError):
    """A device config that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class DeviceConfig:
    """The families a process schedules, and what its file says that changes nothing."""

    families: Families
    notes: tuple[str, ...] = ()
    gpu_core_policy: str = ""  # the file's nvidia.gpuCorePolicy; "": it names none


def gated_families(*, ascend: bool, iluvatar: bool) -> tuple[str, ...]:
    """The gated families (registry.GATED) that HAMi's --enable-ascend and --enable-iluvatar
    turn on."""
    on = {"ascend": ascend, "iluvatar": iluvatar}
    return tuple(name for name in GATED if on[name])


def read_device_config(
    path: str, resources: ResourceDefaults | None = None, enabled: Collection[str] = ()
) -> DeviceConfig:
    """The file's families, of the gated ones those `enabled`. NVIDIA's names must be the
    defaults; with `resources` (serve's flags), NVIDIA's defaults must be those too."""
    where = f"device config {path}"
    try:
        raw = yaml.safe_load(read_text(Path(path))) or {}
    except UnreadableFileError as e:
        raise DeviceConfigError(f"device config {e}") from None
    except yaml.YAMLError as e:
        raise DeviceConfigError(f"{where} is not YAML: {e}") from None
    try:
        families, notes = configured(raw, enabled)
    except ValueError as e:
        raise DeviceConfigError(f"{where}: {e}") from None
    nvidia = raw.get("nvidia") or {}
    _check_nvidia(nvidia, resources, where)
    policy = str(nvidia.get("gpuCorePolicy") or "")
    if policy and policy not in GPU_CORE_POLICIES:
        raise DeviceConfigError(
            f"{where}: nvidia.gpuCorePolicy is {policy!r}, not one of {', '.join(GPU_CORE_POLICIES)}"
        )
    notes += tuple(_gated_off(raw, enabled))
    return DeviceConfig(families, tuple(f"{where}: {n}" for n in notes), policy)


def _gated_off(raw: Mapping[str, Any], enabled: Collection[str]) -> Iterator[str]:
    for name, key in GATED.items():
        if raw.get(key) and name not in enabled:
            yield f"{key} is read but not used: {name} is scheduled only with --enable-{name}"


def chart_device_config(
    ascend_runtime_class_name: str, ascend_hami_vnpu_core: bool, enabled: Collection[str] = ()
) -> DeviceConfig:
    """The families HAMi's chart configures without a device-config override, from its values
    devices.ascend.runtimeClassName and devices.ascend.hamiVnpuCore (hami serve's
    --ascend-runtime-class-name and --ascend-hami-vnpu-core), of the gated ones those
    `enabled`."""
    if not ascend_runtime_class_name and not ascend_hami_vnpu_core:
        return DeviceConfig(from_device_config({}, enabled))
    vnpus = ascend.chart_vnpus(ascend_runtime_class_name, ascend_hami_vnpu_core)
    notes = (
        ()
        if "ascend" in enabled
        else (
            "--ascend-runtime-class-name and --ascend-hami-vnpu-core configure Ascend, which is "
            "scheduled only with --enable-ascend",
        )
    )
    return DeviceConfig(from_device_config({"vnpus": vnpus}, enabled), notes)


def _check_nvidia(
    section: Mapping[str, Any], resources: ResourceDefaults | None, where: str
) -> None:
    ours = resources or ResourceDefaults()
    for key, (flag, attr) in _NVIDIA.items():
        if key not in section or (flag and resources is None):
            continue
        expected = getattr(ours, attr) if flag else getattr(ours.names, attr)
        value = section[key]
        if value is not None and str(value) != str(expected):
            how = f"set {flag} instead" if flag else "NVIDIA's resource names are fixed"
            raise DeviceConfigError(
                f"{where}: nvidia.{key} is {value!r}, not {expected!r}: {how} (docs/families.md)"
            )


def add_device_arguments(p: argparse.ArgumentParser, parse_bool: Callable[[str], bool]) -> None:
    """The flags of `hami serve` that choose the families, for a command that reads them as
    serve does (simulate, explain, status)."""
    p.add_argument(
        "--device-config-file",
        default="",
        help="as hami serve's: HAMi's device-config.yaml, each device family's resource "
        "names and settings (none: the chart's defaults)",
    )
    for name in GATED:
        p.add_argument(
            f"--enable-{name}",
            type=parse_bool,
            default=False,
            metavar="BOOL",
            help=f"as hami serve's: schedule {name}, e.g. --enable-{name}=true (HAMi's flag)",
        )
    p.add_argument(
        "--ascend-runtime-class-name",
        default="",
        help="as hami serve's: the chart's devices.ascend.runtimeClassName",
    )
    p.add_argument(
        "--ascend-hami-vnpu-core",
        type=parse_bool,
        default=False,
        metavar="BOOL",
        help="as hami serve's: the chart's devices.ascend.hamiVnpuCore (Ascend's soft split "
        "on every node that does not say otherwise)",
    )
    # DRA mode's choices that change a decision: which DeviceClass (and driver) each family's
    # claims go to, and how many pods share a card only a DRA driver publishes.
    p.add_argument(
        "--dra-device-classes",
        default=DEFAULT_CLASSES_TEXT,
        help=f"as hami serve's: {HELP['dra_device_classes']}",
    )
    p.add_argument(
        "--dra-split-count",
        type=int,
        default=DRA_SPLIT,
        help=f"as hami serve's: {HELP['dra_split_count']}",
    )
