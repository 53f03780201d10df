from typing import Any

import pytest

from hami.engine.model import PERCENTAGE_UNSET, ContainerRequest
from hami.engine.requests import (
    INT32_MAX,
    MAX_CONTAINERS,
    MAX_GPUS_PER_CONTAINER,
    LimitError,
    RequestError,
    ResourceDefaults,
    container_request,
    pod_request,
)

DEF = ResourceDefaults()


def c(
    limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None
) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if limits is not None:
        res["limits"] = limits
    if requests is not None:
        res["requests"] = requests
    return {"name": "main", "resources": res}


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        (
            c({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}),
            ContainerRequest(1, 1000, PERCENTAGE_UNSET, 0),
        ),
        # a bare gpu means the whole card's memory
        (c({"nvidia.com/gpu": "1"}), ContainerRequest(1, 0, 100, 0)),
        (
            c({"nvidia.com/gpu": 2, "nvidia.com/gpumem-percentage": 30}),
            ContainerRequest(2, 0, 30, 0),
        ),
        (
            c({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 150}),
            ContainerRequest(1, 0, 100, 0),
        ),
        (
            c({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 0}),
            ContainerRequest(1, 0, 100, 0),
        ),
        (c({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 30}), ContainerRequest(1, 0, 100, 30)),
        # limits win over requests
        (
            c({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000}, {"nvidia.com/gpumem": 1000}),
            ContainerRequest(1, 2000, PERCENTAGE_UNSET, 0),
        ),
        (
            c(None, {"nvidia.com/gpu": 1, "nvidia.com/gpumem": "1k"}),
            ContainerRequest(1, 1000, PERCENTAGE_UNSET, 0),
        ),
        (c({"nvidia.com/gpumem": 1000}), None),
        (c({"nvidia.com/gpu": 0}), None),
        (c({"cpu": "1"}), None),
        ({"name": "x"}, None),
    ],
)
def test_container_requests(container: dict[str, Any], expected: ContainerRequest | None) -> None:
    assert container_request(container, DEF) == expected


@pytest.mark.parametrize(
    ("gpumem", "mib"),
    [
        (3000, 3000),  # HAMi's unit: MiB
        ("3000", 3000),
        ("3k", 3000),  # how kube-apiserver stores 3000: still MiB
        ("1e3", 1000),
        ("1Gi", 1024),  # a byte suffix: the bytes it says, in MiB
        ("1000Mi", 1000),
        ("2048Ki", 2),
        ("1.5Gi", 1536),
        ("2G", None),  # 1907.35 MiB: refused, naming the fix
        ("1M", None),
        ("1G", None),
        ("4194304000", 4194304000),  # no suffix: MiB, then refused as out of range below
    ],
)
def test_gpumem_with_a_byte_suffix_is_bytes(gpumem: object, mib: int | None) -> None:
    container = c({"nvidia.com/gpu": 1, "nvidia.com/gpumem": gpumem})
    if mib is None:
        with pytest.raises(RequestError, match=r"not a whole number of MiB: write the MiB"):
            container_request(container, DEF, strict=True)
        assert container_request(container, DEF) is None  # lenient, as HAMi: no request
    elif mib > INT32_MAX:
        with pytest.raises(RequestError, match="out of range"):
            container_request(container, DEF, strict=True)
    else:
        assert container_request(container, DEF, strict=True) == ContainerRequest(
            1, mib, PERCENTAGE_UNSET, 0
        )


def test_memory_factor_applies_to_mib_not_to_bytes() -> None:
    d = ResourceDefaults(memory_factor=2)
    for gpumem, mib in ((1000, 2000), ("1Gi", 1024)):
        got = container_request(c({"nvidia.com/gpu": 1, "nvidia.com/gpumem": gpumem}), d)
        assert got == ContainerRequest(1, mib, PERCENTAGE_UNSET, 0)


def test_default_memory_and_cores_apply_to_bare_requests() -> None:
    d = ResourceDefaults(default_memory=4096, default_cores=20)
    assert container_request(c({"nvidia.com/gpu": 1}), d) == ContainerRequest(
        1, 4096, PERCENTAGE_UNSET, 20
    )


def test_memory_factor_scales_requests() -> None:
    d = ResourceDefaults(memory_factor=1024)
    assert container_request(
        c({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4}), d
    ) == ContainerRequest(1, 4096)


@pytest.mark.parametrize(
    "limits",
    [
        {"nvidia.com/gpu": "1.5"},
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": "lots"},
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": -5},
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": "5e10"},
    ],
)
def test_malformed_values_are_ignored_leniently_and_rejected_strictly(
    limits: dict[str, Any],
) -> None:
    assert container_request(c(limits), DEF) is None
    with pytest.raises(RequestError, match="container main"):
        container_request(c(limits), DEF, strict=True)


def test_pod_request_lists_init_containers_first() -> None:
    spec = {
        "initContainers": [c({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 500})],
        "containers": [c(), c({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000})],
    }
    req = pod_request(spec, DEF)
    assert req.init == (ContainerRequest(1, 500),)
    assert req.app == (None, ContainerRequest(1, 3000))
    assert req.wants_gpu
    assert not pod_request({"containers": [c()]}, DEF).wants_gpu


@pytest.mark.parametrize("strict", [False, True])
def test_gpu_count_above_the_cap_is_refused_in_both_modes(strict: bool) -> None:
    assert container_request(c({"nvidia.com/gpu": MAX_GPUS_PER_CONTAINER}), DEF) is not None
    with pytest.raises(LimitError, match="at most 64 per container"):
        container_request(c({"nvidia.com/gpu": "2e9"}), DEF, strict=strict)


def test_gpu_pods_have_at_most_the_cap_of_containers() -> None:
    many = [{**c({"nvidia.com/gpu": 1}), "name": f"c{i}"} for i in range(MAX_CONTAINERS)]
    assert len(pod_request({"containers": many}, DEF).app) == MAX_CONTAINERS
    with pytest.raises(LimitError, match="at most 64: split it"):
        pod_request({"containers": many, "initContainers": [c({"nvidia.com/gpu": 1})]}, DEF)
    plain = [{"name": f"c{i}"} for i in range(MAX_CONTAINERS + 1)]
    assert not pod_request({"containers": plain}, DEF).wants_gpu  # not ours to limit
