"""HAMi's device-config.yaml (its chart's `hami-scheduler-device` ConfigMap), read by
`hami serve --device-config-file` as HAMi's scheduler reads `--device-config-file`.

The file is taken as it is: every section HAMi reads is read (hami.engine.families.registry
builds each family from its own), and one it cannot read stops the process naming it. The
scheduler runs with the chart's default resource names so far: a file that renames a
family's resources, or NVIDIA's, or sets NVIDIA's defaults other than the flags do, is
refused at start rather than half applied (the cache, the webhook and the bind would not
agree on the names).
"""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from hami.engine.families.base import Family
from hami.engine.families.registry import FAMILIES, Families, from_device_config
from hami.engine.requests import ResourceDefaults
from hami.files import UnreadableFileError, read_text

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


class DeviceConfigError(ValueError):
    """A device config that cannot be used; the message names the file and the key."""


def read_device_config(path: str, resources: ResourceDefaults) -> Families:
    """The families the file configures, checked against what this process schedules."""
    where = f"device config {path}"
    try:
        raw = yaml.safe_load(read_text(Path(path))) or {}
    except UnreadableFileError as e:
        raise DeviceConfigError(f"device config {e}") from None
    except yaml.YAMLError as e:
        raise DeviceConfigError(f"{where} is not YAML: {e}") from None
    if not isinstance(raw, Mapping):
        raise DeviceConfigError(f"{where}: expected HAMi's device-config.yaml, a mapping")
    try:
        families = from_device_config(raw)
    except (ValueError, TypeError, KeyError) as e:
        raise DeviceConfigError(f"{where}: {e}") from None
    _check_nvidia(raw.get("nvidia") or {}, resources, where)
    changed = [
        f"{ours.wire.type} ({', '.join(theirs.wire.resources.all())})"
        for ours, theirs in zip(FAMILIES.members, families.members, strict=False)
        if not _same(ours, theirs)
    ]
    if changed or len(families.members) != len(FAMILIES.members):
        listed = ", ".join(changed) or "its list of chips"
        raise DeviceConfigError(
            f"{where}: the families' settings differ from the chart's defaults ({listed}); "
            "hami serve schedules with the defaults only so far (docs/families.md)"
        )
    return families


def _same(ours: Family, theirs: Family) -> bool:
    """The same family configured the same (a family kept in a plain class compares by its
    attributes)."""
    if ours == theirs:
        return True
    mine = getattr(ours, "__dict__", None)
    return mine is not None and type(ours) is type(theirs) and mine == vars(theirs)


def _check_nvidia(section: Any, resources: ResourceDefaults, where: str) -> None:
    if not isinstance(section, Mapping):
        raise DeviceConfigError(f"{where}: nvidia must be a mapping")
    for key, (flag, attr) in _NVIDIA.items():
        if key not in section:
            continue
        ours = getattr(resources.names, attr) if not flag else getattr(resources, attr)
        value = section[key]
        if str(value) != str(ours):
            how = f"set {flag} instead" if flag else "hami serve schedules the default names"
            raise DeviceConfigError(f"{where}: nvidia.{key} is {value!r}, not {ours!r}: {how}")
