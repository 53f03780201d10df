"""The Ascend section of HAMi's device-config.yaml (`vnpus`), read as HAMi v2.10 reads it."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Template:
    name: str
    memory: int  # MiB
    ai_core: int = 0
    ai_cpu: int = 0


@dataclass(frozen=True, slots=True)
class ChipConfig:
    """One entry of `vnpus.configs`, with HAMi's YAML names."""

    common_word: str
    chip_name: str
    resource_name: str
    resource_memory_name: str
    resource_core_name: str = ""
    memory_allocatable: int = 0
    memory_capacity: int = 0
    memory_factor: int = 0
    ai_core: int = 0
    ai_cpu: int = 0
    runtime_class_name: str = ""
    overwrite_env: bool = False
    templates: tuple[Template, ...] = ()  # sorted by memory, as HAMi sorts them
    super_pod: bool = False


def read_chip(raw: Mapping[str, Any]) -> ChipConfig:
    templates = tuple(
        sorted(
            (
                Template(
                    str(t["name"]),
                    int(t["memory"]),
                    int(t.get("aiCore", 0)),
                    int(t.get("aiCPU", 0)),
                )
                for t in raw.get("templates") or ()
            ),
            key=lambda t: t.memory,
        )
    )
    return ChipConfig(
        common_word=str(raw["commonWord"]),
        chip_name=str(raw.get("chipName", "")),
        resource_name=str(raw["resourceName"]),
        resource_memory_name=str(raw.get("resourceMemoryName", "")),
        resource_core_name=str(raw.get("resourceCoreName") or ""),
        memory_allocatable=int(raw.get("memoryAllocatable", 0)),
        memory_capacity=int(raw.get("memoryCapacity", 0)),
        memory_factor=int(raw.get("memoryFactor", 0)),
        ai_core=int(raw.get("aiCore", 0)),
        ai_cpu=int(raw.get("aiCPU", 0)),
        runtime_class_name=str(raw.get("runtimeClassName") or ""),
        overwrite_env=str(raw.get("overwriteEnv", False)).lower() == "true",
        templates=templates,
        super_pod=bool(raw.get("superPod", False)),
    )


# The chip kinds of HAMi v2.10's chart (charts/hami/templates/scheduler/device-configmap.yaml):
# commonWord chipName memoryAllocatable memoryCapacity aiCore aiCPU memoryFactor superPod,
# then its templates as name:memory:aiCore:aiCPU.
_CHART = """
Ascend910A    910A      32768 32768 30 0 1 no  vir02:2184:2:0 vir04:4369:4:0 vir08:8738:8:0 vir16:17476:16:0
Ascend910B2   910B2     65536 65536 24 6 1 no  vir03_1c_8g:8192:3:1 vir06_1c_16g:16384:6:1 vir12_3c_32g:32768:12:3
Ascend910B3   910B3     65536 65536 20 7 1 no  vir05_1c_16g:16384:5:1 vir10_3c_32g:32768:10:3
Ascend910B4-1 910B4-1   65536 65536 20 7 1 no  vir05_1c_16g:16384:5:1 vir10_3c_32g:32768:10:3
Ascend910B4   910B4     32768 32768 20 7 1 no  vir05_1c_8g:8192:5:1 vir10_3c_16g:16384:10:3
Ascend310P    310P3     21527 24576  8 7 1 no  vir01:3072:1:1 vir02:6144:2:2 vir04:12288:4:4
Ascend910C    Ascend910 65536 65536 20 7 0 yes vir05_1c_16g:16384:5:1 vir10_3c_32g:32768:10:3
"""


def _chart_entry(line: str) -> dict[str, Any]:
    word, chip, mem, cap, core, cpu, factor, pod, *temps = line.split()
    return {
        "chipName": chip,
        "commonWord": word,
        "resourceName": f"huawei.com/{word}",
        "resourceMemoryName": f"huawei.com/{word}-memory",
        "resourceCoreName": f"huawei.com/{word}-core",
        "memoryAllocatable": int(mem),
        "memoryCapacity": int(cap),
        "memoryFactor": int(factor),
        "aiCore": int(core),
        "aiCPU": int(cpu),
        "superPod": pod == "yes",
        "templates": [
            {"name": n, "memory": int(m), "aiCore": int(a), "aiCPU": int(p)}
            for n, m, a, p in (t.split(":") for t in temps)
        ],
    }


_CHART_CONFIGS = tuple(_chart_entry(line) for line in _CHART.strip().splitlines())


def chart_vnpus(runtime_class_name: str = "", hami_vnpu_core: bool = False) -> dict[str, Any]:
    """The `vnpus` section HAMi's chart renders from its values: devices.ascend.hamiVnpuCore,
    and devices.ascend.runtimeClassName as every chip's runtimeClassName."""
    return {
        "hamiVnpuCore": hami_vnpu_core,
        "configs": [{**c, "runtimeClassName": runtime_class_name} for c in _CHART_CONFIGS],
    }


DEFAULT_VNPUS: dict[str, Any] = chart_vnpus()
