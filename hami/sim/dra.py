"""The replay's stand-in for kube-scheduler's DRA allocator, on the claims the DRA placer pins
(hami.engine.dra.translate.pinned_claims): each request names one card by a `uuid` selector, and
the allocator gives it that card or none. In a replay the card always has room (the placer's
decision was taken over the same counts), so each request gets it, consuming what it asks on
a card several claims share and the whole card otherwise, as kube-scheduler 1.36 allocates.
"""

from collections.abc import Iterable, Mapping
from typing import Any

from hami.engine.dra.claimspec import pin
from hami.engine.dra.device import DraDevice


class UnpublishedError(ValueError):
    """A request whose pin names no card a DRA driver publishes on the node."""


def allocated(claim: Mapping[str, Any], devices: Iterable[DraDevice], uid: str) -> dict[str, Any]:
    """The pinned `claim` with the `status.allocation` kube-scheduler writes for it on a node
    whose DRA devices are `devices`; `uid` is the claim's (the API server's to give)."""
    by_pin = {pin(d.driver, d.uuid): d for d in devices}
    results = []
    for i, request in enumerate((claim.get("spec") or {}).get("devices", {}).get("requests", ())):
        exactly = request.get("exactly") or {}
        pins = [s["cel"]["expression"] for s in exactly.get("selectors") or ()]
        device = next((by_pin[p] for p in pins if p in by_pin), None)
        if device is None:
            raise UnpublishedError(f"claim {claim['metadata']['name']}: no published card matches")
        result: dict[str, Any] = {
            "request": request["name"],
            "driver": device.driver,
            "pool": device.pool,
            "device": device.name,
        }
        if device.shared:
            asked = (exactly.get("capacity") or {}).get("requests") or {}
            result |= {"shareID": f"share-{i}", "consumedCapacity": dict(asked)}
        results.append(result)
    meta = {**claim["metadata"], "uid": uid}
    return {**claim, "metadata": meta, "status": {"allocation": {"devices": {"results": results}}}}
