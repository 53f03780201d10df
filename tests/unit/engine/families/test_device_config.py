"""The families from HAMi's device-config.yaml (registry.from_device_config): the chart's
defaults without a file, a user's file as it is, HAMi's own chart's rendering where helm and
HAMi's source are at hand."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from hami.engine.families import (
    amd,
    ascend,
    awsneuron,
    biren,
    cambricon,
    enflame,
    hygon,
    iluvatar,
    kunlun,
    mthreads,
    vastai,
)
from hami.engine.families.base import FamilyWire
from hami.engine.families.metax import MetaxGpu, MetaxSgpu
from hami.engine.families.nvidia import family as nvidia
from hami.engine.families.registry import FAMILIES, Families, from_device_config

HAMI_SRC = Path("/work/hami-src")


def shape(families: Families) -> list[tuple[type, FamilyWire]]:
    """What tells families apart (MetaX's classes hold their config without dataclass eq)."""
    return [(type(f), f.wire) for f in families.members]


def test_without_a_file_the_families_are_each_modules_defaults() -> None:
    assert shape(from_device_config({})) == shape(FAMILIES)
    assert shape(FAMILIES) == shape(
        Families(
            (
                nvidia.FAMILY,
                cambricon.FAMILY,
                hygon.HYGON,
                enflame.WHOLE_FAMILY,
                enflame.DRS_FAMILY,
                mthreads.FAMILY,
                MetaxGpu(),
                MetaxSgpu(),
                kunlun.WHOLE_FAMILY,
                kunlun.VXPU_FAMILY,
                awsneuron.FAMILY,
                amd.FAMILY,
                vastai.FAMILY,
                biren.FAMILY,
                *ascend.from_config(ascend.DEFAULT_VNPUS),
                *iluvatar.FAMILIES,
            )
        )
    )


def test_a_users_section_renames_that_familys_resources_only() -> None:
    families = from_device_config(
        {
            "hygon": {
                "resourceCountName": "example.com/dcu",
                "resourceMemoryName": "example.com/dcu-mem",
                "resourceCoreName": "example.com/dcu-cores",
                "memoryFactor": 2,
            },
            "vnpus": {"configs": [ascend.DEFAULT_VNPUS["configs"][2]]},
        }
    )
    dcu = families.by_type()["DCU"].wire.resources
    assert (dcu.count, dcu.memory, dcu.cores, dcu.memory_factor) == (
        "example.com/dcu",
        "example.com/dcu-mem",
        "example.com/dcu-cores",
        2,
    )
    # HAMi loads only the Ascend chips its vnpus section lists.
    assert [t for t in families.other_types() if t.startswith("Ascend")] == ["Ascend910B3"]
    assert families.by_type()["AMD"] == FAMILIES.by_type()["AMD"]


@pytest.mark.parametrize(
    ("config", "message"),
    [({"hygon": ["x"]}, "hygon must be a mapping"), ({"iluvatars": {"a": 1}}, "iluvatars")],
)
def test_a_section_of_the_wrong_shape_is_refused(config: dict[str, Any], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        from_device_config(config)


@pytest.mark.skipif(
    not (HAMI_SRC / "charts" / "hami").is_dir(), reason="needs HAMi v2.10's source (/work/hami-src)"
)
def test_hamis_own_chart_rendering_gives_the_same_families() -> None:
    from tests.reference.record_hami import chart_device_config
    from tests.unit.test_helm_render import helm_binary

    helm = helm_binary()
    config = yaml.safe_load(chart_device_config(helm, HAMI_SRC))
    families = from_device_config(config)
    assert families.other_resource_names() == FAMILIES.other_resource_names()
    assert [f.wire for f in families.members] == [f.wire for f in FAMILIES.members]
