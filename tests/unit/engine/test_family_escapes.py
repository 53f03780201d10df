"""Each family's own ways past its device plugin (FamilyWire.device_env and share_env), refused at
admission as NVIDIA's visible-devices variables are (hami.engine.familyescapes)."""

from typing import Any

import pytest

from hami.engine.admission import AdmissionConfig, admit, admit_ephemeral
from hami.engine.familyescapes import family_escapes
from tests.builders import FAMILIES, family_limits

BY_TYPE = FAMILIES.by_type()
ASCEND = BY_TYPE["Ascend910B3"]
AMD = BY_TYPE["AMD"]
NEURON = BY_TYPE["AWSNeuron"]
MTHREADS = BY_TYPE["Mthreads"]
GCU = BY_TYPE["GCU"]
DRS = BY_TYPE["Enflame"]
DCU = BY_TYPE["DCU"]


def container(name: str, limits: dict[str, str] | None = None, **env: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox"}
    if limits:
        c["resources"] = {"limits": limits}
    if env:
        c["env"] = [
            {"name": k, **(v if isinstance(v, dict) else {"value": v})} for k, v in env.items()
        ]
    return c


def pod(*containers: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": list(containers)},
    }


def asking(family: Any, **env: Any) -> dict[str, Any]:
    return pod(container("app", family_limits(family, 1), **env))


FROM_SECRET = {"valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}

# (pod, the variables refused in it); a variable of a family the pod does not ask passes.
CASES = [
    pytest.param(asking(ASCEND), [], id="ascend-clean"),
    pytest.param(
        asking(ASCEND, ASCEND_VISIBLE_DEVICES="0-7"),
        ["ASCEND_VISIBLE_DEVICES"],
        id="ascend-devices",
    ),
    pytest.param(asking(ASCEND, ASCEND_VISIBLE_DEVICES=""), [], id="ascend-devices-empty"),
    pytest.param(asking(ASCEND, ASCEND_VISIBLE_DEVICES="none"), [], id="ascend-devices-none"),
    pytest.param(
        asking(ASCEND, ASCEND_VNPU_SPECS="vir16"), ["ASCEND_VNPU_SPECS"], id="ascend-template"
    ),
    pytest.param(
        asking(ASCEND, ASCEND_VNPU_SPECS=""), ["ASCEND_VNPU_SPECS"], id="ascend-template-empty"
    ),
    pytest.param(asking(ASCEND, NPU_MEM_QUOTA="65536"), ["NPU_MEM_QUOTA"], id="ascend-quota"),
    pytest.param(asking(ASCEND, ASCEND_RT_VISIBLE_DEVICES="0"), [], id="ascend-cann-filter"),
    pytest.param(
        asking(ASCEND, ASCEND_VISIBLE_DEVICES=FROM_SECRET),
        ["ASCEND_VISIBLE_DEVICES"],
        id="ascend-valuefrom",
    ),
    pytest.param(asking(AMD, AMD_VISIBLE_DEVICES="all"), ["AMD_VISIBLE_DEVICES"], id="amd-toolkit"),
    pytest.param(asking(AMD, HSA_CU_MASK="0:0-303"), ["HSA_CU_MASK"], id="amd-cu-mask"),
    pytest.param(asking(AMD, ROCR_VISIBLE_DEVICES="1,0"), ["ROCR_VISIBLE_DEVICES"], id="amd-rocr"),
    pytest.param(
        asking(AMD, HIP_DEVICE_MEMORY_LIMIT="192G"), ["HIP_DEVICE_MEMORY_LIMIT"], id="amd-memory"
    ),
    pytest.param(asking(AMD, HIP_VISIBLE_DEVICES="0"), [], id="amd-hip-filter"),
    pytest.param(
        asking(NEURON, NEURON_RT_VISIBLE_CORES="0-7"),
        ["NEURON_RT_VISIBLE_CORES"],
        id="neuron-cores",
    ),
    pytest.param(
        asking(MTHREADS, MTHREADS_VISIBLE_DEVICES="all"),
        ["MTHREADS_VISIBLE_DEVICES"],
        id="mthreads",
    ),
    pytest.param(
        asking(GCU, ENFLAME_VISIBLE_DEVICES="0,1"), ["ENFLAME_VISIBLE_DEVICES"], id="enflame-gcu"
    ),
    pytest.param(
        asking(DRS, ENFLAME_VISIBLE_DEVICES="all"), ["ENFLAME_VISIBLE_DEVICES"], id="enflame-drs"
    ),
    # Another family's variables: that vendor's runtime does not run on these nodes.
    pytest.param(asking(DCU, ASCEND_VISIBLE_DEVICES="0-7"), [], id="dcu-ascend-variable"),
    pytest.param(pod(container("app", AMD_VISIBLE_DEVICES="all")), [], id="no-family"),
    # A sidecar runs on the family's node too: the runtime mounts what it names.
    pytest.param(
        pod(
            container("app", family_limits(ASCEND, 1)),
            container("side", ASCEND_VISIBLE_DEVICES="0-7"),
        ),
        ["ASCEND_VISIBLE_DEVICES"],
        id="ascend-sidecar-devices",
    ),
    # ... but a share's variables mean nothing in a container the plugin gave nothing.
    pytest.param(
        pod(container("app", family_limits(AMD, 1)), container("side", HSA_CU_MASK="0:0-303")),
        [],
        id="amd-sidecar-share",
    ),
]


@pytest.mark.parametrize(("the_pod", "refused"), CASES)
def test_each_familys_variables(the_pod: dict[str, Any], refused: list[str]) -> None:
    problems = family_escapes(the_pod, families=FAMILIES)
    assert [next(v for v in refused if v in p) for p in problems] == refused, problems


@pytest.mark.parametrize(
    ("prefix", "pinned", "refused"),
    [
        ("", (), True),
        ("APP_", (), False),
        (
            "",
            (
                "ASCEND_VISIBLE_DEVICES",
                "ASCEND_VNPU_SPECS",
                "NPU_MEM_QUOTA",
                "NPU_PRIORITY",
                "NPU_GLOBAL_SHM_PATH",
                "NPU_LOCAL_SHM_PATH",
            ),
            False,
        ),
        ("ASCEND_", ("ASCEND_VISIBLE_DEVICES",), True),  # ASCEND_VNPU_SPECS is still open
    ],
)
def test_an_env_from_that_could_set_one(
    prefix: str, pinned: tuple[str, ...], refused: bool
) -> None:
    the_pod = asking(ASCEND, **{v: "" for v in pinned if v == "ASCEND_VISIBLE_DEVICES"})
    app = the_pod["spec"]["containers"][0]
    # Pinning a share's variable with any value is refused on its own: check envFrom alone.
    app.setdefault("env", []).extend(
        {"name": v, "value": "x"} for v in pinned if v != "ASCEND_VISIBLE_DEVICES"
    )
    app["envFrom"] = [{"configMapRef": {"name": "cm"}, **({"prefix": prefix} if prefix else {})}]
    problems = [p for p in family_escapes(the_pod, families=FAMILIES) if "envFrom" in p]
    assert bool(problems) is refused, problems


def test_admission_refuses_a_family_pod_and_names_the_variable() -> None:
    a = admit(asking(ASCEND, ASCEND_VISIBLE_DEVICES="0-7"), AdmissionConfig(families=FAMILIES))
    assert not a.allowed
    assert "ASCEND_VISIBLE_DEVICES=0-7" in a.message and "spec.containers[0].env[0]" in a.message
    assert admit(asking(ASCEND), AdmissionConfig(families=FAMILIES)).allowed


def test_admission_refuses_a_pod_asking_nvidia_and_a_family() -> None:
    the_pod = pod(
        container("gpu", {"nvidia.com/gpu": "1"}),
        container("npu", family_limits(AMD, 1), HSA_CU_MASK="0:0-303"),
    )
    a = admit(the_pod, AdmissionConfig(families=FAMILIES))
    assert not a.allowed and "HSA_CU_MASK" in a.message


def test_a_debug_container_added_to_a_family_pod_is_checked() -> None:
    old = asking(MTHREADS)
    new = asking(MTHREADS)
    new["spec"]["ephemeralContainers"] = [container("debug", MTHREADS_VISIBLE_DEVICES="all")]
    a = admit_ephemeral(new, old, AdmissionConfig(families=FAMILIES))
    assert not a.allowed and "MTHREADS_VISIBLE_DEVICES" in a.message
    # One already running is not judged again.
    assert admit_ephemeral(new, new, AdmissionConfig(families=FAMILIES)).allowed
