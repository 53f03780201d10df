"""Cards and pods for the MetaX family tests."""

from collections.abc import Mapping

from hami.engine.families.metax.registration import custom
from hami.engine.model import Card, DeviceInfo, Usage


def card(info: DeviceInfo, used: int = 0, usedmem: int = 0, usedcores: int = 0) -> Card:
    return Card(info, Usage(used, usedmem, usedcores), 0.0)


def sgpu(
    uuid: str,
    *,
    index: int = 0,
    count: int = 100,
    mem: int = 128,
    cores: int = 100,
    healthy: bool = True,
    qos: str = "",
    zone: int = 0,
) -> DeviceInfo:
    return DeviceInfo(
        uuid, index, count, mem, cores, "Metax-SGPU", 0, "", healthy, custom=custom(qos, zone)
    )


def container(
    limits: Mapping[str, object] | None = None, requests: Mapping[str, object] | None = None
) -> dict[str, object]:
    resources: dict[str, object] = {}
    if limits is not None:
        resources["limits"] = dict(limits)
    if requests is not None:
        resources["requests"] = dict(requests)
    return {"name": "c", "resources": resources}
