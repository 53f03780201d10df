"""The shape of HAMi v2.10's device-config.yaml: every section and key HAMi reads, and the kind
of value its YAML decoder takes there (pkg/scheduler/config's Config and each family's config
struct, decoded by gopkg.in/yaml.v2).

A file is checked against it before any family is built from it, so that a value HAMi could
not decode stops the process with the section and field named, never a trace from deep in a
family's constructor. Sections and keys HAMi does not read are ignored, as HAMi ignores them,
and reported (`check` returns them), since a misspelt key silently changes nothing.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Union


class Kind(Enum):
    NAME = "a resource name"
    TEXT = "text"
    INT32 = "a whole number (32 bits)"
    INT64 = "a whole number (64 bits)"
    BOOL = "true or false"
    ANY = "any value"  # read by HAMi's device plugin only, never by the scheduler


_BITS = {Kind.INT32: 31, Kind.INT64: 63}


@dataclass(frozen=True)
class Each:
    """A list whose every item is a mapping of these keys; `required` must be given."""

    keys: Mapping[str, "Field"]
    required: tuple[str, ...] = ()


Field = Union[Kind, Each, Mapping[str, "Field"]]  # noqa: UP007 (a recursive alias)

N, I32, I64, B, T, A = Kind.NAME, Kind.INT32, Kind.INT64, Kind.BOOL, Kind.TEXT, Kind.ANY

_COUNT_MEMORY_CORE: Mapping[str, Field] = {
    "resourceCountName": N,
    "resourceMemoryName": N,
    "resourceCoreName": N,
}

SECTIONS: Mapping[str, Field] = {
    # NVIDIA's section: its names and defaults are checked against hami serve's flags
    # (hami.runtime.deviceconfig); the rest is the device plugin's.
    "nvidia": {
        "resourceCountName": N,
        "resourceMemoryName": N,
        "resourceCoreName": N,
        "resourceMemoryPercentageName": N,
        "resourcePriorityName": N,
        "overwriteEnv": B,
        "defaultMemory": I32,
        "defaultCores": I32,
        "defaultGPUNum": I32,
        "memoryFactor": I32,
        "disableCoreLimit": B,
        "migProfileAllowlist": A,
        "gpuCorePolicy": T,
        "runtimeClassName": T,
        "deviceSplitCount": A,
        "deviceMemoryScaling": A,
        "deviceCoreScaling": A,
        "preConfiguredDeviceMemory": A,
        "libCudaLogLevel": A,
        "enableNumaTopology": A,
    },
    "cambricon": _COUNT_MEMORY_CORE,
    "hygon": {**_COUNT_MEMORY_CORE, "memoryFactor": I32},
    "metax": {
        "resourceCountName": N,
        "resourceVCountName": N,
        "resourceVMemoryName": N,
        "resourceVCoreName": N,
        "sgpuTopologyAware": B,
    },
    "enflame": {
        "resourceNameGCU": N,
        "resourceNameDRSGCU": N,
        "resourceNameGCUMemory": N,
        "resourceNameGCUCore": N,
        "resourceNameVGCU": N,
        "resourceNameVGCUPercentage": N,
    },
    "mthreads": _COUNT_MEMORY_CORE,
    "iluvatars": Each(
        {"commonWord": T, "chipName": T, **_COUNT_MEMORY_CORE}, required=("commonWord",)
    ),
    "kunlun": {"resourceCountName": N, "resourceVCountName": N, "resourceVMemoryName": N},
    "awsneuron": {"resourceCountName": N, "resourceCoreName": N},
    "amd": _COUNT_MEMORY_CORE,
    "vastai": {"resourceCountName": N},
    "biren": {"resourceCountName": N},
    "vnpus": {
        "hamiVnpuCore": B,
        "configs": Each(
            {
                "commonWord": T,
                "chipName": T,
                "resourceName": N,
                "resourceMemoryName": N,
                "resourceCoreName": N,
                "memoryAllocatable": I64,
                "memoryCapacity": I64,
                "memoryFactor": I32,
                "aiCore": I32,
                "aiCPU": I32,
                "runtimeClassName": T,
                "overwriteEnv": B,
                "templates": Each(
                    {"name": T, "memory": I64, "aiCore": I32, "aiCPU": I32},
                    required=("name", "memory"),
                ),
                "superPod": B,
            },
            required=("commonWord", "resourceName"),
        ),
    },
}


def check(config: Any) -> tuple[str, ...]:
    """What HAMi ignores in the file (unknown sections and keys), one line each.

    Raises ValueError naming the field (`vnpus.configs[2].templates[0].memory`) for a value
    HAMi's decoder refuses, or a required one left out."""
    ignored: list[str] = []
    _mapping(config, SECTIONS, "", ignored)
    return tuple(ignored)


def _mapping(value: Any, keys: Mapping[str, Field], path: str, ignored: list[str]) -> None:
    if not isinstance(value, Mapping):
        where = path[:-1] if path else "the file"
        raise ValueError(f"{where} must be a mapping, got {type(value).__name__}")
    for key, item in value.items():
        field = keys.get(str(key))
        if field is None:
            what = "section" if not path else "key"
            ignored.append(f"{path}{key}: not a {what} HAMi v2.10 reads; ignored")
        else:
            _field(item, field, f"{path}{key}", ignored)


def _field(value: Any, field: Field, path: str, ignored: list[str]) -> None:
    if value is None:  # as Go's decoder leaves the field at its zero value
        return
    if isinstance(field, Kind):
        _value(value, field, path)
    elif isinstance(field, Each):
        if not isinstance(value, list):
            raise ValueError(f"{path} must be a list, got {type(value).__name__}")
        for i, item in enumerate(value):
            _mapping(item, field.keys, f"{path}[{i}].", ignored)
            for key in field.required:
                if item.get(key) in (None, ""):
                    raise ValueError(f"{path}[{i}].{key} is required")
    else:
        _mapping(value, field, f"{path}.", ignored)


def _value(value: Any, kind: Kind, path: str) -> None:
    if kind is Kind.ANY:
        return
    if kind in (Kind.NAME, Kind.TEXT):
        ok = isinstance(value, str)
    elif kind is Kind.BOOL:
        ok = isinstance(value, bool)
    else:
        bits = _BITS[kind]
        ok = isinstance(value, int) and not isinstance(value, bool)
        ok = ok and -(2**bits) <= value < 2**bits
    if not ok:
        raise ValueError(f"{path} must be {kind.value}, got {value!r}")
