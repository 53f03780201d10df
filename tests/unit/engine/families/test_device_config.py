"""The families from HAMi's device-config.yaml (registry.from_device_config): the chart's
defaults without a file, a user's file as it is, HAMi's own chart's rendering where helm and
HAMi's source are at hand."""

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami.engine.asks import pod_request
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
from hami.engine.families.registry import Families, configured, from_device_config
from hami.engine.requests import ResourceDefaults
from tests.builders import FAMILIES

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
    families, notes = configured(config)
    assert notes == ()  # every key of HAMi's own file is one HAMi reads
    assert families.other_resource_names() == FAMILIES.other_resource_names()
    assert [f.wire for f in families.members] == [f.wire for f in FAMILIES.members]


# Each section of HAMi's device-config.yaml renaming its family's resources: the section, then
# per family type the (count, memory, cores) it then reads.
RENAMES: list[tuple[str, Any, dict[str, tuple[str, str, str]]]] = [
    (
        "cambricon",
        {
            "resourceCountName": "x.io/mlu",
            "resourceMemoryName": "x.io/mlu-m",
            "resourceCoreName": "x.io/mlu-c",
        },
        {"MLU": ("x.io/mlu", "x.io/mlu-m", "x.io/mlu-c")},
    ),
    (
        "hygon",
        {
            "resourceCountName": "x.io/dcu",
            "resourceMemoryName": "x.io/dcu-m",
            "resourceCoreName": "x.io/dcu-c",
        },
        {"DCU": ("x.io/dcu", "x.io/dcu-m", "x.io/dcu-c")},
    ),
    (
        "enflame",
        {
            "resourceNameGCU": "x.io/gcu",
            "resourceNameDRSGCU": "x.io/drs",
            "resourceNameGCUMemory": "x.io/gcu-m",
        },
        {
            "GCU": ("x.io/gcu", "", ""),
            "Enflame": ("x.io/drs", "x.io/gcu-m", "enflame.com/gcu-core"),
        },
    ),
    (
        "mthreads",
        {
            "resourceCountName": "x.io/mt",
            "resourceMemoryName": "x.io/mt-m",
            "resourceCoreName": "x.io/mt-c",
        },
        {"Mthreads": ("x.io/mt", "x.io/mt-m", "x.io/mt-c")},
    ),
    (
        "metax",
        {
            "resourceCountName": "x.io/mx",
            "resourceVCountName": "x.io/smx",
            "resourceVMemoryName": "x.io/smx-m",
            "resourceVCoreName": "x.io/smx-c",
        },
        {"Metax-GPU": ("x.io/mx", "", ""), "Metax-SGPU": ("x.io/smx", "x.io/smx-m", "x.io/smx-c")},
    ),
    (
        "kunlun",
        {
            "resourceCountName": "x.io/xpu",
            "resourceVCountName": "x.io/vxpu",
            "resourceVMemoryName": "x.io/vxpu-m",
        },
        {"kunlun": ("x.io/xpu", "", ""), "XPU": ("x.io/vxpu", "x.io/vxpu-m", "")},
    ),
    (
        "awsneuron",
        {"resourceCountName": "x.io/neuron", "resourceCoreName": "x.io/neuroncore"},
        {"AWSNeuron": ("x.io/neuron", "", "x.io/neuroncore")},
    ),
    (
        "amd",
        {
            "resourceCountName": "x.io/amd",
            "resourceMemoryName": "x.io/amd-m",
            "resourceCoreName": "x.io/amd-c",
        },
        {"AMD": ("x.io/amd", "x.io/amd-m", "x.io/amd-c")},
    ),
    ("vastai", {"resourceCountName": "x.io/va"}, {"Vastai": ("x.io/va", "", "")}),
    ("biren", {"resourceCountName": "x.io/br"}, {"Biren": ("x.io/br", "", "")}),
    (
        "vnpus",
        {
            "configs": [
                {
                    **ascend.DEFAULT_VNPUS["configs"][2],
                    "resourceName": "x.io/npu",
                    "resourceMemoryName": "x.io/npu-m",
                    "resourceCoreName": "x.io/npu-c",
                }
            ]
        },
        {"Ascend910B3": ("x.io/npu", "x.io/npu-m", "x.io/npu-c")},
    ),
    (
        "iluvatars",
        [
            {
                "commonWord": "BI-V150",
                "chipName": "BI-V150",
                "resourceCountName": "x.io/bi",
                "resourceMemoryName": "x.io/bi-m",
                "resourceCoreName": "x.io/bi-c",
            }
        ],
        {"BI-V150": ("x.io/bi", "x.io/bi-m", "x.io/bi-c")},
    ),
]


@pytest.mark.parametrize(("section", "value", "renamed"), RENAMES, ids=[r[0] for r in RENAMES])
def test_each_sections_names_are_the_ones_its_families_read_and_claim(
    section: str, value: Any, renamed: dict[str, tuple[str, str, str]]
) -> None:
    families = from_device_config({section: value})
    by_type = families.by_type()
    for kind, (count, memory, cores) in renamed.items():
        names = by_type[kind].wire.resources
        assert (names.count, names.memory, names.cores) == (count, memory, cores)
        # A container asking the new name is the family's; one asking the default is nobody's.
        default = FAMILIES.by_type()[kind].wire.resources.count
        asking = {"name": "c", "resources": {"limits": {count: "1"}}}
        request = pod_request({"containers": [asking]}, ResourceDefaults(), families=families)
        assert [a.type for c in request.families for a in c] == [kind]
        assert by_type[kind].claim(asking, {"spec": {"containers": [asking]}}).claimed
        before = {"name": "c", "resources": {"limits": {default: "1"}}}
        assert not pod_request(
            {"containers": [before]}, ResourceDefaults(), families=families
        ).families
    # The other families keep the chart's names.
    others = [f.wire for f in families.members if f.wire.type not in renamed]
    assert others == [
        f.wire
        for f in FAMILIES.members
        if f.wire.type not in renamed
        and not (section == "vnpus" and f.wire.type.startswith("Ascend"))
        and not (section == "iluvatars" and type(f) is type(by_type[next(iter(renamed))]))
    ]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"hygon": {"memoryFactor": "2"}}, "hygon.memoryFactor must be a whole number"),
        ({"hygon": {"memoryFactor": 2**31}}, "hygon.memoryFactor must be a whole number"),
        ({"amd": {"resourceCountName": ["a"]}}, "amd.resourceCountName must be a resource name"),
        ({"metax": {"sgpuTopologyAware": "true"}}, "metax.sgpuTopologyAware must be true or false"),
        ({"vnpus": {"configs": {"a": 1}}}, "vnpus.configs must be a list"),
        (
            {"vnpus": {"configs": [{"resourceName": "a/b"}]}},
            "vnpus.configs[0].commonWord is required",
        ),
        ({"vnpus": {"configs": ["x"]}}, "vnpus.configs[0] must be a mapping"),
        (
            {"iluvatars": [{"commonWord": "A", "resourceCountName": 1}]},
            "iluvatars[0].resourceCountName",
        ),
        (
            {"iluvatars": [{"commonWord": "A"}, {"commonWord": "A"}]},
            "two families of the device config are both 'A'",
        ),
        (
            {"biren": {"resourceCountName": "amd.com/gpu"}},
            "amd.com/gpu is named for both AMD and Biren",
        ),
    ],
)
def test_a_value_hami_could_not_decode_is_refused_naming_its_field(
    config: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        from_device_config(config)


def test_what_hami_ignores_is_noted_not_refused() -> None:
    families, notes = configured(
        {
            "gpus": {},
            "hygon": {"resourceCountName": "x.io/dcu", "memoryFactr": 2},
            "amd": {"resourceMemoryName": "x.io/m"},
        }
    )
    assert notes == (
        "gpus: not a section HAMi v2.10 reads; ignored",
        "hygon.memoryFactr: not a key HAMi v2.10 reads; ignored",
        # HAMi takes a given section as written: AMD's count name left out names none.
        "AMD: the device config names no count resource; no pod can ask for it",
    )
    assert families.by_type()["AMD"].wire.resources.memory == "x.io/m"
