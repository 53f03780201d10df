"""Enflame GCUs (HAMi v2.10's pkg/device/enflame): whole GCUs and DRS shares.

Two families share a node's GCUs:

* `GCU`, whole GCUs. The plugin registers only a count in the node's capacity; HAMi
  makes one card per unit (`<node>-GCU-<i>`) and gives each to one container alone.
* `Enflame`, DRS shares. The plugin describes its cards and the DRS profiles they can be
  cut into (`enflame.com/gcu-drs-capacity`: each card's slice capacity, and profile
  names such as `3g.20gb`, 3 slices and 20 GB). A container asks for one share either
  by slices (`enflame.com/drs-gcu: 3`: the profile of exactly that size) or by memory and
  cores (`gcu-memory`, `gcu-core`: the smallest profile holding both); it takes the
  profile's memory and its slices' share of the cores, and counts its slices against the
  card's capacity. The bind tells the plugin the profile in annotations of its own.
"""

from collections.abc import Mapping
from typing import Any

from hami.engine.families.base import FamilyResources, FamilyWire
from hami.engine.families.enflame.drs import DrsFamily
from hami.engine.families.enflame.gcu import WHOLE, WholeGcuFamily
from hami.engine.families.enflame.profiles import CAPACITY, DRS

__all__ = ["DRS_FAMILY", "WHOLE_FAMILY", "DrsFamily", "WholeGcuFamily", "from_config"]

# The Enflame device plugin names a container's GCUs in this, and Enflame's container toolkit
# mounts the GCUs it names into any container.
DEVICE_ENV = ("ENFLAME_VISIBLE_DEVICES",)


def from_config(section: Mapping[str, Any]) -> tuple[WholeGcuFamily, DrsFamily]:
    """Both families from the `enflame` section of HAMi's device-config.yaml (HAMi's
    defaults where a name is absent; `resourceNameVGCU` is the DRS count's old name)."""

    def name(key: str) -> str:
        return str(section.get(key) or "")

    drs = FamilyResources(
        name("resourceNameDRSGCU") or name("resourceNameVGCU") or "enflame.com/drs-gcu",
        name("resourceNameGCUMemory") or "enflame.com/gcu-memory",
        name("resourceNameGCUCore") or "enflame.com/gcu-core",
    )
    return (
        WholeGcuFamily(
            FamilyWire(
                type=WHOLE,
                vendor=WHOLE,
                resources=FamilyResources(name("resourceNameGCU") or "enflame.com/gcu"),
                register_annotation="",  # a count in the node's capacity, no card list
                handshake_annotation="",
                to_allocate_annotation="hami.io/enflame-gcu-devices-to-allocate",
                allocated_annotation="hami.io/enflame-gcu-devices-allocated",
                lock_name="",  # HAMi takes no node lock for Enflame
                device_env=DEVICE_ENV,
            )
        ),
        DrsFamily(
            FamilyWire(
                type=DRS,
                vendor=DRS,
                resources=drs,
                register_annotation=CAPACITY,
                handshake_annotation="",
                to_allocate_annotation="",  # the DRS plugin reads the allocation only
                allocated_annotation="hami.io/enflame-vgpu-devices-allocated",
                lock_name="",
                use_uuid="enflame.com/use-gpuuuid",
                nouse_uuid="enflame.com/nouse-gpuuuid",
                device_env=DEVICE_ENV,
            )
        ),
    )


WHOLE_FAMILY, DRS_FAMILY = from_config({})
