"""Huawei Ascend NPUs (HAMi v2.10's pkg/device/ascend): one family per chip kind."""

from collections.abc import Mapping
from typing import Any

from hami.engine.families.ascend.config import DEFAULT_VNPUS, chart_vnpus, read_chip
from hami.engine.families.ascend.device import AscendFamily

__all__ = ["DEFAULT_VNPUS", "AscendFamily", "chart_vnpus", "from_config"]


def from_config(vnpus: Mapping[str, Any]) -> tuple[AscendFamily, ...]:
    """One family per entry of the device-config's `vnpus` section, in its order."""
    soft = str(vnpus.get("hamiVnpuCore", False)).lower() == "true"
    return tuple(AscendFamily(read_chip(raw), soft) for raw in vnpus.get("configs") or ())
