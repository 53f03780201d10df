"""Hygon DCU (HAMi's pkg/device/hygon): HAMi's common walk, cores 100 unless asked.

A container asks `hygon.com/dcunum` cards, optionally `hygon.com/dcumem` MiB and
`hygon.com/dcucores` percent of each; without a memory ask it takes the whole card, without
a cores ask all of it (HAMi's default of 100 cores: a bare count is an exclusive card). The
checks are HAMi's common ones in its order, the node score is not changed (HAMi's ScoreNode
returns 0), and a bind writes the same list under both allocation annotations.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami.engine.families.base import (
    Claim,
    FamilyFit,
    FamilyRequest,
    FamilyResources,
    FamilyWire,
    FitPod,
)
from hami.engine.families.common import (
    RequestRules,
    claim_by_count,
    decode_registration,
    encode_allocation,
    read_request,
    walk,
)
from hami.engine.model import Card, DeviceInfo, PodDevices

WIRE = FamilyWire(
    type="DCU",
    vendor="DCU",  # HAMi's DeviceVendor for these cards (its CommonWord)
    resources=FamilyResources(
        count="hygon.com/dcunum", memory="hygon.com/dcumem", cores="hygon.com/dcucores"
    ),
    register_annotation="hami.io/node-dcu-register",
    handshake_annotation="hami.io/node-handshake-dcu",
    to_allocate_annotation="hami.io/dcu-devices-to-allocate",
    allocated_annotation="hami.io/dcu-devices-allocated",
    use_type="hygon.com/use-dcutype",
    nouse_type="hygon.com/nouse-dcutype",
    use_uuid="hygon.com/use-gpuuuid",
    nouse_uuid="hygon.com/nouse-gpuuuid",
)

_RULES = RequestRules(default_cores=100)


@dataclass(frozen=True)
class Hygon:
    wire: FamilyWire = WIRE

    def decode_node(self, annotations: Mapping[str, str]) -> tuple[DeviceInfo, ...] | None:
        return decode_registration(annotations, self.wire)

    def container_request(
        self, container: Mapping[str, Any], *, strict: bool = False
    ) -> FamilyRequest | None:
        return read_request(container, self.wire, _RULES, strict=strict)

    def fit(
        self, cards: Sequence[Card], request: FamilyRequest, pod: FitPod, allocated: PodDevices
    ) -> FamilyFit:
        return walk(cards, request, pod, self.wire)

    def score_node(self, cards: Sequence[Card], devices: PodDevices, binpack: bool) -> float:
        return 0.0

    def annotations(self, devices: PodDevices) -> dict[str, str]:
        return encode_allocation(self.wire, devices)

    def claim(self, container: Mapping[str, Any], pod: Mapping[str, Any]) -> Claim:
        return claim_by_count(container, self.wire)


HYGON = Hygon()
