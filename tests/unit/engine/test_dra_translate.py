"""The webhook's DRA mode, engine side (hami.engine.dra): which pods move, what is written in
them, the claim each container's asks become, and the way back (docs/dra.md)."""

import json
from typing import Any

import pytest

from hami.engine.dra.claimspec import SelectorError, claim_spec, pinned_spec
from hami.engine.dra.config import DraClass, DraConfig, DraConfigError, parse_classes
from hami.engine.dra.translate import (
    GATE,
    REQUESTS,
    TranslateError,
    claim_base,
    claim_object,
    container_asks,
    restore,
    short,
    to_dra,
)
from hami.engine.model import ContainerDevice
from hami.engine.requests import RequestError, ResourceDefaults
from tests.builders import FAMILIES

ON = DraConfig("all")
NV = "hami-core-gpu.project-hami.io"
ATTRS = f'device.attributes["{NV}"]'


def pod(*containers: dict[str, Any], **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "train", "annotations": dict(annotations)},
        "spec": {"schedulerName": "hami-scheduler", "containers": list(containers)},
    }


def container(name: str = "cuda", **limits: Any) -> dict[str, Any]:
    return {"name": name, "image": "cuda", "resources": {"limits": dict(limits)}}


def limited(limits: dict[str, Any], name: str = "cuda") -> dict[str, Any]:
    return container(name, **limits)


def gpu(**extra: Any) -> dict[str, Any]:
    return container(**{"nvidia.com/gpu": 1, **extra})


def move(p: dict[str, Any], cfg: DraConfig = ON) -> dict[str, Any] | None:
    return to_dra(p, cfg, ResourceDefaults(), FAMILIES, claim_base(p, "0123456789"))


def spec_of(c: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    _, asks = container_asks(c, annotations, ON, ResourceDefaults(), FAMILIES)
    return claim_spec(asks)


def exactly(**fields: Any) -> dict[str, Any]:
    base = {"deviceClassName": NV, "allocationMode": "ExactCount", "count": 1}
    return {"devices": {"requests": [{"name": "nvidia", "exactly": {**base, **fields}}]}}


def test_a_gpu_pod_is_gated_and_its_resources_move_into_a_claim_entry() -> None:
    written = pod(
        gpu(**{"nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30, "cpu": "1"}),
        container("sidecar", cpu="100m"),
    )
    moved = move(written)
    assert moved is not None
    cuda, sidecar = moved["spec"]["containers"]
    assert cuda["resources"] == {"limits": {"cpu": "1"}, "claims": [{"name": "hami-cuda"}]}
    assert sidecar == written["spec"]["containers"][1]
    assert moved["spec"]["resourceClaims"] == [
        {"name": "hami-cuda", "resourceClaimName": "train-cuda"}
    ]
    assert moved["spec"]["schedulingGates"] == [{"name": GATE}]
    assert json.loads(moved["metadata"]["annotations"][REQUESTS]) == {
        "cuda": {
            "limits": {
                "nvidia.com/gpu": 1,
                "nvidia.com/gpucores": 30,
                "nvidia.com/gpumem": 3000,
            }
        }
    }
    assert written["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1


@pytest.mark.parametrize(
    ("limits", "annotations", "expected"),
    [
        ({}, {}, exactly()),  # a whole card: no capacity asked consumes all of it
        ({"nvidia.com/gpu": 2}, {}, exactly(count=2)),
        (
            {"nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30},
            {},
            exactly(capacity={"requests": {"memory": "3000Mi", "cores": "30"}}),
        ),
        # A share of the card's memory is resolved by the placer on the card it chose.
        ({"nvidia.com/gpumem-percentage": 50}, {}, exactly()),
        (
            {},
            {"nvidia.com/use-gpuuuid": "GPU-a, GPU-b", "nvidia.com/nouse-gpuuuid": "GPU-c"},
            exactly(
                selectors=[
                    {"cel": {"expression": f'{ATTRS}.uuid in ["GPU-a", "GPU-b"]'}},
                    {"cel": {"expression": f'!({ATTRS}.uuid in ["GPU-c"])'}},
                ]
            ),
        ),
        (
            {},
            {"nvidia.com/use-gputype": "A100,H100", "nvidia.com/nouse-gputype": "Tesla T4"},
            exactly(
                selectors=[
                    {
                        "cel": {
                            "expression": f'{ATTRS}.productName.lowerAscii().contains("a100")'
                            f' || {ATTRS}.productName.lowerAscii().contains("h100")'
                        }
                    },
                    {
                        "cel": {
                            "expression": f'!{ATTRS}.productName.lowerAscii().contains("tesla t4")'
                        }
                    },
                ]
            ),
        ),
    ],
)
def test_a_containers_asks_become_one_claim_spec(
    limits: dict[str, Any], annotations: dict[str, str], expected: dict[str, Any]
) -> None:
    assert spec_of(gpu(**limits), annotations) == expected


def test_the_cards_chosen_pin_the_claim_one_request_per_card() -> None:
    _, asks = container_asks(
        gpu(**{"nvidia.com/gpu": 2, "nvidia.com/gpumem-percentage": 25}),
        {"nvidia.com/use-gputype": "T4"},
        ON,
        ResourceDefaults(),
        FAMILIES,
    )
    # The engine resolved the share on each card (a 15360 MiB T4 and a 7680 MiB one).
    chosen = (ContainerDevice("GPU-a", 3840, 0), ContainerDevice("GPU-b", 1920, 0))
    requests = pinned_spec(asks, chosen)["devices"]["requests"]
    assert [r["name"] for r in requests] == ["nvidia-0", "nvidia-1"]
    first = requests[0]["exactly"]
    assert (first["count"], first["capacity"]) == (
        1,
        {"requests": {"memory": "3840Mi", "cores": "0"}},
    )
    assert [s["cel"]["expression"] for s in first["selectors"]] == [
        f'{ATTRS}.productName.lowerAscii().contains("t4")',
        f'{ATTRS}.uuid == "GPU-a"',
    ]
    assert requests[1]["exactly"]["capacity"] == {"requests": {"memory": "1920Mi", "cores": "0"}}
    with pytest.raises(ValueError, match="1 NVIDIA cards chosen for an ask of 2"):
        pinned_spec(asks, chosen[:1])


def test_the_claim_is_named_by_the_pods_entry_and_owned_by_the_pod() -> None:
    moved = move(pod(gpu()))
    assert moved is not None
    moved["metadata"].update(uid="u-1", namespace="ns")
    claim = claim_object(moved, "cuda", {"devices": {}})
    assert claim["metadata"] == {
        "name": "train-cuda",
        "namespace": "ns",
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": "train",
                "uid": "u-1",
            }
        ],
    }
    with pytest.raises(TranslateError, match="no claim entry for container other"):
        claim_object(moved, "other", {})


def test_hygon_and_nvidia_in_one_pod_each_get_their_class() -> None:
    both = limited({"nvidia.com/gpu": 1, "hygon.com/dcunum": 1, "hygon.com/dcumem": 2000})
    requests = spec_of(both, {"hygon.com/use-dcutype": "Z100"})["devices"]["requests"]
    assert [(r["name"], r["exactly"]["deviceClassName"]) for r in requests] == [
        ("nvidia", NV),
        ("dcu", "dra.hygon.com"),
    ]
    # HAMi's Hygon rule: a DCU ask without cores takes all of them.
    assert requests[1]["exactly"]["capacity"] == {"requests": {"memory": "2000Mi", "cores": "100"}}
    assert requests[1]["exactly"]["selectors"] == [
        {
            "cel": {
                "expression": 'device.attributes["dra.hygon.com"].productName.lowerAscii()'
                '.contains("z100")'
            }
        }
    ]


@pytest.mark.parametrize(
    ("annotations", "says"),
    [
        ({"nvidia.com/use-gpuuuid": ""}, "annotation nvidia.com/use-gpuuuid names nothing"),
        ({"nvidia.com/nouse-gputype": " , "}, "annotation nvidia.com/nouse-gputype names nothing"),
        ({"nvidia.com/use-gputype": 'A100"||true'}, "is not a card UUID or model name"),
    ],
)
def test_an_annotation_that_selects_nothing_is_refused(
    annotations: dict[str, str], says: str
) -> None:
    with pytest.raises(SelectorError, match=says):
        move(pod(gpu(), **annotations))


@pytest.mark.parametrize(
    ("p", "cfg"),
    [
        (pod(gpu()), DraConfig()),  # DRA mode off
        (pod(gpu()), DraConfig("annotated")),
        (pod(gpu(), **{"hami.io/device-world": "device-plugin"}), ON),
        (pod(container(cpu="1")), ON),
        # A family without a DeviceClass keeps the whole pod on the device plugins' path.
        (pod(gpu(), container("mlu", **{"cambricon.com/vmlu": 1})), ON),
        (pod(gpu()), DraConfig("all", (DraClass("DCU", "dra.hygon.com", "dra.hygon.com"),))),
    ],
)
def test_pods_that_stay_on_the_device_plugins_path(p: dict[str, Any], cfg: DraConfig) -> None:
    assert move(p, cfg) is None


def test_an_annotated_pod_moves_in_annotated_mode() -> None:
    assert move(pod(gpu(), **{"hami.io/device-world": "dra"}), DraConfig("annotated"))


@pytest.mark.parametrize(
    ("p", "says"),
    [
        (pod(gpu(), **{"hami.io/device-world": "DRA"}), "valid are dra, device-plugin"),
        (
            pod(limited({"cambricon.com/vmlu": 1}), **{"hami.io/device-world": "dra"}),
            "MLU devices, which have no DeviceClass",
        ),
    ],
)
def test_a_world_that_cannot_be_had_is_refused(p: dict[str, Any], says: str) -> None:
    with pytest.raises(TranslateError, match=says):
        move(p)


def test_a_malformed_value_is_refused_as_admission_refuses_it() -> None:
    with pytest.raises(RequestError):
        move(pod(gpu(**{"nvidia.com/gpumem": "lots"})))


def test_restore_undoes_the_move_and_moving_again_gives_the_same_pod() -> None:
    written = pod(
        gpu(**{"nvidia.com/gpumem": 1000}),
        container("two", **{"nvidia.com/gpu": 2}),
        **{"nvidia.com/use-gputype": "T4"},
    )
    moved = move(written)
    assert moved is not None
    back = restore(moved)
    assert back["spec"] == written["spec"]
    assert back["metadata"] == written["metadata"]
    assert move(back) == moved


@pytest.mark.parametrize(
    ("annotation", "says"),
    [
        ("not json", "is not what the webhook writes"),
        ('{"cuda": {"env": {}}}', "is not what the webhook writes"),
        ('{"other": {"limits": {"nvidia.com/gpu": 1}}}', "names container other"),
        ('{"cuda": {"limits": {"nvidia.com/gpu": 1}}}', "both in its resources"),
    ],
)
def test_a_record_that_does_not_fit_the_pod_is_refused(annotation: str, says: str) -> None:
    with pytest.raises(TranslateError, match=says):
        restore(pod(gpu(), **{REQUESTS: annotation}))


def test_long_names_are_cut_with_a_hash() -> None:
    name = short("p" * 60 + "-container")
    assert len(name) == 63 and name != short("p" * 60 + "-containes")
    assert short("short") == "short"
    generated = {"metadata": {"generateName": "job-"}, "spec": {}}
    assert claim_base(generated, "abcdef0123") == "job-abcdef01"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("NVIDIA", "must be FAMILY=DEVICECLASS"),
        ("TPU=tpu.example.com", "no device family 'TPU'"),
        ("NVIDIA=a,NVIDIA=b", "names family NVIDIA twice"),
    ],
)
def test_device_class_settings_that_cannot_be_used(text: str, says: str) -> None:
    with pytest.raises(DraConfigError, match=says):
        parse_classes(text, frozenset({"NVIDIA", "DCU"}))


def test_device_class_settings() -> None:
    assert parse_classes(
        "NVIDIA=gpu.example.com@drv.example.com, DCU=dra.hygon.com", frozenset({"NVIDIA", "DCU"})
    ) == (
        DraClass("NVIDIA", "gpu.example.com", "drv.example.com"),
        DraClass("DCU", "dra.hygon.com", "dra.hygon.com"),
    )
    with pytest.raises(DraConfigError, match="--dra-mode 'on'"):
        DraConfig("on")
