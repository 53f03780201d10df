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
from typing import Any

from hami.engine.codec import split_list
from hami.engine.dra.config import DraClass
from hami.engine.families.base import FamilyWire
from hami.engine.model import PERCENTAGE_UNSET

# What a UUID or a model name in an annotation may hold: printable ASCII but the quote and the
# backslash, so that it is a CEL string literal as written.
VALUE = re.compile(r"^[ !#-\[\]-~]+$")


class SelectorError(ValueError):
    """An annotation that cannot select devices; the message names it and the fix."""


@dataclass(frozen=True, slots=True)
class DeviceAsk:
    """One container's ask of one family's DRA devices."""

    dra: DraClass
    nums: int
    memreq: int = 0  # MiB per card; 0: `mem_percentage` of the card, resolved on the card
    mem_percentage: int = PERCENTAGE_UNSET
    coresreq: int = 0
    selectors: tuple[str, ...] = ()

    @property
    def request_name(self) -> str:
        return self.dra.family.lower()

    def memory_on(self, totalmem: int) -> int:
        """MiB this ask takes on a card of `totalmem` MiB (HAMi's rule: MiB beat the share)."""
        if self.memreq > 0 or self.mem_percentage == PERCENTAGE_UNSET:
            return self.memreq
        return totalmem * self.mem_percentage // 100


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


def claim_spec(asks: tuple[DeviceAsk, ...], card_memory: int | None = None) -> dict[str, Any]:
    """The ResourceClaim spec for one container's asks. A memory share is resolved on a card of
    `card_memory` MiB (the placer's, once it has chosen); without one the claim asks no memory,
    which consumes the whole card's: right for a whole card, not for a smaller share."""
    requests = []
    for ask in asks:
        capacity: dict[str, str] = {}
        memory = ask.memreq if card_memory is None else ask.memory_on(card_memory)
        if memory > 0:
            capacity["memory"] = f"{memory}Mi"
        if ask.coresreq > 0:
            capacity["cores"] = str(ask.coresreq)
        exactly: dict[str, Any] = {
            "deviceClassName": ask.dra.device_class,
            "allocationMode": "ExactCount",
            "count": ask.nums,
        }
        if ask.selectors:
            exactly["selectors"] = [{"cel": {"expression": s}} for s in ask.selectors]
        if capacity:
            exactly["capacity"] = {"requests": capacity}
        requests.append({"name": ask.request_name, "exactly": exactly})
    return {"devices": {"requests": requests}}
