"""What a container asks of DRA devices, and the ResourceClaim spec that asks it (docs/dra.md).

A function of the pod alone, so that the webhook, the placer and a restarted leader all derive
the same claim: one request per family the container asks, of that family's DeviceClass, with
the card count, the memory and cores per card as consumable capacity, and HAMi's card
annotations as CEL selectors on the driver's `uuid` and `productName` attributes.
"""

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from hami.engine.codec import split_list
from hami.engine.dra.config import DraClass
from hami.engine.dra.device import to_units
from hami.engine.families.base import FamilyWire
from hami.engine.model import PERCENTAGE_UNSET, ContainerDevices

# What a UUID or a model name in an annotation may hold: printable ASCII but the quote and the
# backslash, so that it is a CEL string literal as written.
VALUE = re.compile(r"^[ !#-\[\]-~]+$")


class SelectorError(ValueError):
    """An annotation that cannot select devices; the message names it and the fix."""


class UnpublishedCardError(ValueError):
    """A chosen card whose compute units are not published (now): placed again later."""


NO_UNITS: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class DeviceAsk:
    """One container's ask of one family's DRA devices."""

    dra: DraClass
    nums: int
    memreq: int = 0  # MiB per card; 0: `mem_percentage` of the card, resolved on the card
    mem_percentage: int = PERCENTAGE_UNSET
    coresreq: int = 0
    selectors: tuple[str, ...] = ()
    # The family's driver asks `cores` in the card's compute units (FamilyWire.dra_core_units).
    core_units: bool = False

    @property
    def request_name(self) -> str:
        return self.dra.family.lower()


def _values(annotations: Mapping[str, str], key: str) -> tuple[str, ...] | None:
    """The names an annotation lists; None when absent. One naming nothing selects no device,
    under DRA a pod that waits forever: refused."""
    if not key or key not in annotations:
        return None
    values = tuple(split_list(annotations[key]))
    if not values:
        raise SelectorError(
            f"annotation {key} names nothing ({annotations[key]!r}): under DRA it would match "
            "no device; remove it, or list the cards' UUIDs or models, comma-separated"
        )
    for v in values:
        if not VALUE.match(v):
            raise SelectorError(
                f"annotation {key}: {v!r} is not a card UUID or model name (printable ASCII "
                "without quotes or backslashes); correct it"
            )
    return values


def _literals(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def selectors(dra: DraClass, wire: FamilyWire, annotations: Mapping[str, str]) -> tuple[str, ...]:
    """HAMi's use/nouse annotations of the family as CEL: UUIDs exactly, models as HAMi matches
    them (a case-insensitive part of the model name)."""
    attrs = f"device.attributes[{json.dumps(dra.driver)}]"
    product = f"{attrs}.productName.lowerAscii()"
    out = []
    if (uuids := _values(annotations, wire.use_uuid)) is not None:
        out.append(f"{attrs}.uuid in {_literals(uuids)}")
    if (uuids := _values(annotations, wire.nouse_uuid)) is not None:
        out.append(f"!({attrs}.uuid in {_literals(uuids)})")
    if (types := _values(annotations, wire.use_type)) is not None:
        lowered = tuple(t.lower() for t in types)
        out.append(" || ".join(f"{product}.contains({json.dumps(t)})" for t in lowered))
    if (types := _values(annotations, wire.nouse_type)) is not None:
        lowered = tuple(t.lower() for t in types)
        out.append(" && ".join(f"!{product}.contains({json.dumps(t)})" for t in lowered))
    return tuple(out)


def _request(
    name: str,
    ask: DeviceAsk,
    count: int,
    memory: int,
    cores: int,
    pins: tuple[str, ...] = (),
    exact: bool = False,
) -> dict[str, Any]:
    """One request; `exact` asks memory and cores even at 0, since a capacity not asked is
    consumed whole (a gpumem-only pod would otherwise take all of a card's cores)."""
    capacity: dict[str, str] = {}
    if memory > 0 or exact:
        capacity["memory"] = f"{memory}Mi"
    if cores > 0 or exact:
        capacity["cores"] = str(cores)
    exactly: dict[str, Any] = {
        "deviceClassName": ask.dra.device_class,
        "allocationMode": "ExactCount",
        "count": count,
    }
    chosen = (*ask.selectors, *pins)
    if chosen:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in chosen]
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    return {"name": name, "exactly": exactly}


def claim_spec(asks: tuple[DeviceAsk, ...]) -> dict[str, Any]:
    """The ResourceClaim spec for one container's asks, before a card is chosen: a memory share
    asks no memory (the whole card's), since only the card tells its MiB."""
    requests = [_request(ask.request_name, ask, ask.nums, ask.memreq, ask.coresreq) for ask in asks]
    return {"devices": {"requests": requests}}


def pin(driver: str, uuid: str) -> str:
    """The selector that pins a request to the card `uuid` among `driver`'s devices."""
    return f"device.attributes[{json.dumps(driver)}].uuid == {json.dumps(uuid)}"


def pinned_spec(
    asks: tuple[DeviceAsk, ...], devices: ContainerDevices, units: Mapping[str, int] = NO_UNITS
) -> dict[str, Any]:
    """The claim spec once the engine has chosen `devices` for the container: one request per
    card, pinned by its UUID, asking what the engine counted on it (a share already resolved
    on the card; the percent of cores in the card's compute units, `units` by card UUID, where
    its family's driver counts them so), so kube-scheduler's allocator takes exactly that card
    or none."""
    requests = []
    for ask in asks:
        mine = [d for d in devices if d.type == ask.dra.family]
        if len(mine) != ask.nums:
            raise ValueError(f"{len(mine)} {ask.dra.family} cards chosen for an ask of {ask.nums}")
        for i, d in enumerate(mine):
            pins = (pin(ask.dra.driver, d.uuid),)
            name = f"{ask.request_name}-{i}"
            cores = d.usedcores
            if ask.core_units:
                if not units.get(d.uuid):
                    raise UnpublishedCardError(f"{ask.dra.family} card {d.uuid} publishes no cores")
                cores = to_units(cores, units[d.uuid])
            requests.append(_request(name, ask, 1, d.usedmem, cores, pins, exact=True))
    return {"devices": {"requests": requests}}
