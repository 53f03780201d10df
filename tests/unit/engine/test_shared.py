"""Equal values the cache keeps for many pods are kept once."""

from hami.engine.codec import decode_pod_devices
from hami.engine.model import ContainerDevice
from hami.engine.requests import ResourceDefaults, pod_request
from hami.engine.usage import pod_usage


def spec() -> dict[str, object]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}
    return {"containers": [{"name": "c", "resources": {"limits": limits}}]}


def test_pods_of_one_shape_share_their_request() -> None:
    first, second = (pod_request(spec(), ResourceDefaults()) for _ in range(2))
    assert first == second and first is second


def test_pods_on_one_card_share_its_name_and_their_usage() -> None:
    text = "".join(["GPU-", "77b9c63c", ",NVIDIA,1000,10:;"])  # built at run time, not a literal
    a, b = decode_pod_devices(text), decode_pod_devices(text[:])
    assert a[0][0].uuid is b[0][0].uuid and a[0][0].type is b[0][0].type
    one = ((ContainerDevice("GPU-a", 1000, 10),),)
    assert pod_usage(one, 0)["GPU-a"] is pod_usage(one, 0)["GPU-a"]
