import pytest

from hami.engine.codec import (
    CodecError,
    decode_node_devices,
    decode_pod_devices,
    encode_node_devices,
    encode_pod_devices,
)
from hami.engine.model import ContainerDevice, ContainerRequest, DeviceInfo, PodDevices, PodRequest
from hami.engine.vetting import per_container

D = ContainerDevice


@pytest.mark.parametrize(
    ("devices", "wire"),
    [
        (((D("GPU-aaa", 1000, 0),),), "GPU-aaa,NVIDIA,1000,0:;"),
        (
            ((D("GPU-aaa", 1000, 30), D("GPU-bbb", 1000, 30)),),
            "GPU-aaa,NVIDIA,1000,30:GPU-bbb,NVIDIA,1000,30:;",
        ),
        (
            ((D("GPU-a", 3000, 0),), (D("GPU-a", 5000, 0),)),
            "GPU-a,NVIDIA,3000,0:;GPU-a,NVIDIA,5000,0:;",
        ),
        (((D("GPU-init1", 500, 10),), ()), "GPU-init1,NVIDIA,500,10:;;"),
        (((), (D("GPU-x", 1, 2),)), ";GPU-x,NVIDIA,1,2:;"),
        ((), ""),
    ],
)
def test_allocation_string_round_trips(
    devices: tuple[tuple[ContainerDevice, ...], ...], wire: str
) -> None:
    assert encode_pod_devices(devices) == wire
    assert decode_pod_devices(wire) == devices


def test_device_plugin_consumed_string_decodes_to_empty_containers() -> None:
    assert decode_pod_devices(";;") == ((), ())


def test_non_integer_memory_is_an_error() -> None:
    with pytest.raises(CodecError, match="integers"):
        decode_pod_devices("GPU-a,NVIDIA,lots,0:;")


def test_node_json_with_omitted_zero_fields() -> None:
    raw = (
        '[{"id":"GPU-0","count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4",'
        '"mode":"hami-core","health":true},'
        '{"id":"GPU-1","index":1,"count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4",'
        '"numa":1,"mode":"hami-core"}]'
    )
    a, b = decode_node_devices(raw)
    assert a == DeviceInfo("GPU-0", 0, 10, 15360, 100, "NVIDIA-Tesla T4", 0, "hami-core", True)
    assert (b.index, b.numa, b.health) == (1, 1, False)


def test_node_json_encoding_omits_zero_and_false_like_go() -> None:
    dev = DeviceInfo("GPU-0", 0, 10, 15360, 100, "NVIDIA-Tesla T4", 0, "hami-core", True)
    assert encode_node_devices((dev,)) == (
        '[{"id":"GPU-0","count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4",'
        '"mode":"hami-core","health":true}]'
    )
    assert decode_node_devices(encode_node_devices((dev,))) == (dev,)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            "GPU-x,10,15360,100,NVIDIA-Tesla T4,0,true,2,hami-core:GPU-y,10,15360,100,NVIDIA-Tesla T4,1,false,3,mig:",
            [("GPU-x", 2, 0, True, "hami-core"), ("GPU-y", 3, 1, False, "mig")],
        ),
        ("GPU-x,10,15360,100,NVIDIA-Tesla T4,0,true:", [("GPU-x", 0, 0, True, "hami-core")]),
    ],
)
def test_node_legacy_format(raw: str, expected: list[tuple[str, int, int, bool, str]]) -> None:
    got = [(d.id, d.index, d.numa, d.health, d.mode) for d in decode_node_devices(raw)]
    assert got == expected


@pytest.mark.parametrize(
    "raw", ["[{", '{"id":"x"}', "[{}]", "GPU-x,10,15360:", '[{"id":"a","count":"ten"}]']
)
def test_malformed_node_lists_are_errors(raw: str) -> None:
    with pytest.raises(CodecError):
        decode_node_devices(raw)


A1 = ContainerDevice("GPU-a", 1000, 0)
B2 = ContainerDevice("GPU-b", 2000, 30)
GPU = ContainerRequest(1, 1000)


def _pod(*shape: str) -> PodRequest:
    """`i`/`I`: init container without/with a GPU; `c`/`C`: app container without/with."""
    init = tuple(GPU if s == "I" else None for s in shape if s in "iI")
    app = tuple(GPU if s == "C" else None for s in shape if s in "cC")
    return PodRequest(init=init, app=app)


# HAMi's device plugin gives the n-th entry to the n-th container (init first) when it names
# the container (cache folder, CUDA_DISABLE_CONTROL check), so the entry of a GPU-less container
# must be there, empty: that is what we write. HAMi v2.10's scheduler leaves it out; both forms
# are read back one entry per container.
@pytest.mark.parametrize(
    ("shape", "devices", "written", "hami_v210"),
    [
        ("C", ((A1,),), "GPU-a,NVIDIA,1000,0:;", "GPU-a,NVIDIA,1000,0:;"),
        ("cC", ((), (A1,)), ";GPU-a,NVIDIA,1000,0:;", "GPU-a,NVIDIA,1000,0:;"),
        ("Cc", ((A1,), ()), "GPU-a,NVIDIA,1000,0:;;", "GPU-a,NVIDIA,1000,0:;"),
        ("iCC", ((), (A1,), (B2,)), ";GPU-a,NVIDIA,1000,0:;GPU-b,NVIDIA,2000,30:;", None),
        ("IcC", ((A1,), (), (B2,)), "GPU-a,NVIDIA,1000,0:;;GPU-b,NVIDIA,2000,30:;", None),
    ],
)
def test_gpu_less_containers_keep_their_place(
    shape: str, devices: PodDevices, written: str, hami_v210: str | None
) -> None:
    assert encode_pod_devices(devices) == written
    assert per_container(decode_pod_devices(written), _pod(*shape)) == devices
    omitted = hami_v210 or "".join(
        encode_pod_devices((d,)) for d in devices if d
    )  # HAMi v2.10 writes only the entries with cards
    assert per_container(decode_pod_devices(omitted), _pod(*shape)) == devices
