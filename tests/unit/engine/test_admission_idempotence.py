"""Admission run over its own output changes nothing, for any pod shape and configuration.

kube-apiserver may call a webhook again after other webhooks mutated the pod
(reinvocationPolicy), so a second pass that added anything would stack patches.
"""

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.engine.admission import AdmissionConfig, admit
from hami.engine.families.nvidia.family import NvidiaFamily
from hami.engine.injection import InjectionConfig, driver_profile
from hami.engine.jsonpatch import copy_json, diff
from hami.engine.requests import ResourceDefaults
from tests.builders import FAMILIES

RESOURCES = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/priority",
    "cpu",
)
VALUES = st.sampled_from([0, 1, 2, "1", "3", 30, 50, 100, 1000, "4Gi", "500m", None])
SECTION = st.dictionaries(st.sampled_from(RESOURCES), VALUES, max_size=4)

CONFIGS = [
    AdmissionConfig(families=FAMILIES),
    AdmissionConfig(
        gpu_core_policy="force",
        overwrite_env=True,
        runtime_class_name="nvidia",
        families=FAMILIES.replacing(NvidiaFamily(ResourceDefaults(), "force")),
    ),
    AdmissionConfig(
        resources=ResourceDefaults(default_gpu_num=1),
        families=FAMILIES.replacing(NvidiaFamily(ResourceDefaults(default_gpu_num=1))),
    ),
    AdmissionConfig(injection=InjectionConfig(driver=driver_profile("gke")), families=FAMILIES),
    AdmissionConfig(
        injection=InjectionConfig(
            mode="standalone",
            driver=driver_profile("gke"),
            hook_path="/home/kubernetes/bin/nvidia/vgpu",
        ),
        families=FAMILIES,
    ),
]


@st.composite
def containers(draw: st.DrawFn, prefix: str) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(0 if prefix == "i" else 1, 3))):
        c: dict[str, Any] = {"name": f"{prefix}{i}", "image": "x"}
        if draw(st.booleans()):
            # Empty sections too: a second pass must not tidy up what the first one left.
            c["resources"] = {
                section: {k: v for k, v in draw(SECTION).items() if v is not None}
                for section in ("limits", "requests")
                if draw(st.booleans())
            }
        if draw(st.booleans()):
            # "all" is refused in a GPU pod (hami.engine.escapes): admitted only in other pods.
            value = draw(st.sampled_from(["none", "all"]))
            c["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}]
        out.append(c)
    return out


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(containers("c"))}
    init = draw(containers("i"))
    if init:
        spec["initContainers"] = init
    spec["schedulerName"] = draw(st.sampled_from(["", "hami-scheduler", "default-scheduler"]))
    meta: dict[str, Any] = {"name": draw(st.sampled_from(["p", ""]))}
    annotations = draw(
        st.dictionaries(
            st.sampled_from(["hami.io/gpu-scheduler-policy", "hami.io/node-scheduler-policy"]),
            st.sampled_from(["binpack", "spread", "mutex,binpack"]),
        )
    )
    if annotations:
        meta["annotations"] = annotations
    if draw(st.booleans()):
        meta["labels"] = {"hami.io/webhook": draw(st.sampled_from(["ignore", "x"]))}
    return {"metadata": meta, "spec": spec}


@settings(max_examples=400, deadline=None)
@given(pods(), st.sampled_from(CONFIGS))
def test_admit_of_admit_adds_nothing(pod: dict[str, Any], cfg: AdmissionConfig) -> None:
    once = admit(pod, cfg, "fallback")
    if not once.allowed:
        return
    twice = admit(once.pod, cfg, "fallback")
    assert twice.allowed, twice.message
    assert diff(once.pod, twice.pod) == []


@settings(max_examples=200, deadline=None)
@given(pods(), st.sampled_from(CONFIGS))
def test_admit_leaves_the_pod_it_was_given_as_it_was(
    pod: dict[str, Any], cfg: AdmissionConfig
) -> None:
    """admit mutates copies (hami.engine.jsonpatch.copy_json), never the request's pod."""
    before = copy.deepcopy(pod)
    admit(pod, cfg, "fallback")
    assert pod == before


def test_a_json_copy_is_equal_and_shares_nothing_mutable() -> None:
    doc: dict[str, Any] = {
        "a": [{"b": 1, "c": [1.5, None, True]}],
        "d": ("e", {"f": "g"}),
        "h": "i",
    }
    copied = copy_json(doc)
    assert copied == copy.deepcopy(doc)
    copied["a"][0]["c"].append(2)
    copied["d"][1]["f"] = "changed"
    assert doc == {"a": [{"b": 1, "c": [1.5, None, True]}], "d": ("e", {"f": "g"}), "h": "i"}
