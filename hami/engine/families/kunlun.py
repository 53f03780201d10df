"""Kunlunxin XPUs (HAMi v2.10's pkg/device/kunlun): whole XPUs and vXPUs, one topology.

Two families share the XPUs of a node:

* `kunlun`, whole XPUs. The device plugin registers no card list, only a count in the
  node's capacity; HAMi makes one card per unit (`<node>-kunlun-<i>`, 98304 MiB, the
  second half on NUMA 1), takes only idle cards and tells the plugin the chosen indices
  in `BAIDU_COM_DEVICE_IDX`.
* `XPU`, vXPUs. The plugin registers a JSON card list; a memory request rounds up to a
  quarter, a half or the whole card (24576, 49152, 98304 MiB) with cores in proportion,
  and a card is shared only by vXPUs of one size.

Both pick cards the way HAMi's topo.go does for an eight-XPU board of two groups of four
(positions 0-3 and 4-7 of the node's card list): one, two or four XPUs from the group
that leaves the fewest stranded, else two or four joined across the groups, or all eight.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hami.engine import reasons as r
from hami.engine.checks import Over, beyond
from hami.engine.codec import encode_pod_devices
from hami.engine.families.base import (
    NO_BIND,
    NO_NODE,
    BindContext,
    Claim,
    FamilyFit,
    FamilyRequest,
    FamilyResources,
    FamilyWire,
    FitPod,
    NodeFacts,
)
from hami.engine.families.basic import capacity_of, index_suffix
from hami.engine.families.common import (
    claim_by_count,
    decode_registration,
    encode_allocation,
    lookup,
    quantity_value,
    uuid_allowed,
)
from hami.engine.model import Card, ContainerDevice, ContainerDevices, DeviceInfo, PodDevices, Usage
from hami.engine.policy import NodePolicy, filtered_out
from hami.engine.quantity import QuantityError, as_int64
from hami.engine.requests import RequestError

WHOLE = "kunlun"
VXPU = "XPU"
CARD_MEMORY = 98304  # MiB of one XPU, as HAMi assumes for every card
VXPU_SIZES = (24576, 49152)  # a vXPU is a quarter, a half, or else the whole card
DEVICE_INDEX = "BAIDU_COM_DEVICE_IDX"  # pod: the whole XPUs' indices for the plugin
# Both families also honour the plugin's own UUID selection annotations.
PLUGIN_USE_UUID = "baidu.com/use-gpuuuid"
PLUGIN_NOUSE_UUID = "baidu.com/nouse-gpuuuid"
# The links of an eight-XPU board: two XPUs across the groups, four as a linked set.
CROSS_PAIRS = ((0, 4), (1, 5), (2, 6), (3, 7))
QUADS = ((0, 1, 4, 5), (2, 3, 6, 7), (0, 2, 4, 6), (1, 3, 5, 7), (0, 3, 4, 7), (1, 2, 5, 6))
ODD_ORDER = (1, 3, 2, 4)  # a single XPU goes where 1, then 3, then 2, then 4 are free


def _resources(section: Mapping[str, Any]) -> tuple[FamilyResources, FamilyResources]:
    """The `kunlun` section of HAMi's device-config.yaml: the whole-XPU count, and the
    vXPU count and memory (the chart's names where absent)."""
    whole = FamilyResources(str(section.get("resourceCountName") or "kunlunxin.com/xpu"))
    vxpu = FamilyResources(
        str(section.get("resourceVCountName") or "kunlunxin.com/vxpu"),
        str(section.get("resourceVMemoryName") or "kunlunxin.com/vxpu-memory"),
    )
    return whole, vxpu


Fits = Callable[[Card], bool]


def _pick(cards: Sequence[Card], start: int, nums: int, fits: Fits) -> list[int]:
    """HAMi's devicepick: the first `nums` fitting cards from position `start` to 7. (HAMi
    indexes past the end of a node with fewer than eight cards; we stop there.)"""
    out: list[int] = []
    for card in cards[start : min(8, len(cards))]:
        if fits(card):
            out.append(card.info.index)
            if len(out) == nums:
                break
    return out


def _linked(cards: Sequence[Card], nums: int, fits: Fits) -> list[int]:
    """HAMi's interconnect: two XPUs joined across the groups, or a linked set of four."""
    free = [c.info.index for c in cards if fits(c)]
    if nums == 2:
        for a in free:
            for b in free:
                if a != b and ((a, b) in CROSS_PAIRS or (b, a) in CROSS_PAIRS):
                    return [a, b]
    # HAMi takes the first linked set that fits when four to six are free; with six it
    # prefers one that leaves a linked pair free, which on an eight-XPU board is always
    # the first that fits (checked over every six of eight), so that rule is not repeated.
    if nums == 4 and len(free) in (4, 5, 6):
        for quad in QUADS:
            if set(quad) <= set(free):
                return list(quad)
    return []


def select(cards: Sequence[Card], nums: int, fits: Fits) -> list[int]:
    """HAMi's graghSelect: the indices of the XPUs to take, [] when none fit the topology.

    The groups are positions 0-3 and 4-7 (and beyond) of the node's card list, which HAMi
    counts by position but names by each card's index."""
    left = sum(1 for c in cards[:4] if fits(c))
    right = sum(1 for c in cards[4:] if fits(c))
    if nums == 8:
        return list(range(8)) if left + right == 8 else []
    if nums not in (1, 2, 4):
        return []
    if left >= nums or right >= nums:
        for slots in range(nums, 5):
            want = ODD_ORDER[slots - 1] if nums % 2 else slots
            if left == want:
                return _pick(cards, 0, nums, fits)
            if right == want:
                return _pick(cards, 4, nums, fits)
    return _linked(cards, nums, fits)


def _bubbles(indices: Sequence[int]) -> int:
    """HAMi's countbubble: how badly `indices` strand the XPUs of each group."""
    left = sum(1 for i in indices if i < 4)
    right = len(indices) - left
    if left == 0 and right == 0:
        return 1
    return sum(0 if n == 4 else 2 if n == 1 else 1 for n in (left, right))


@dataclass(frozen=True)
class KunlunFamily:
    """Whole XPUs (`kunlun`) or vXPUs (`XPU`): the same topology, different cards."""

    wire: FamilyWire

    @property
    def whole(self) -> bool:
        return self.wire.type == WHOLE

    def decode_node(
        self, annotations: Mapping[str, str], node: NodeFacts = NO_NODE
    ) -> tuple[DeviceInfo, ...] | None:
        if not self.whole:
            return decode_registration(annotations, self.wire, "json")
        units = capacity_of(node, self.wire.resources.count)
        if not units or units < 0:
            return None
        return tuple(
            DeviceInfo(
                f"{node.name}-kunlun-{i}", i, 100, CARD_MEMORY, 100, WHOLE, int(i >= units // 2)
            )
            for i in range(units)
        )

    def container_request(
        self, container: Mapping[str, Any], *, strict: bool = False
    ) -> FamilyRequest | None:
        """HAMi's GenerateResourceRequests: a whole XPU takes all of a card; a vXPU's memory
        rounds up to a size, its cores in proportion; none named is a whole card."""
        names = self.wire.resources
        name = str(container.get("name", "?"))
        res = container.get("resources") or {}
        raw = lookup(res, names.count)
        if raw is None:
            return None
        try:
            nums = as_int64(raw)
            raw_mem = lookup(res, names.memory) if names.memory else None
            mem = as_int64(raw_mem) if raw_mem is not None else None
        except QuantityError as e:
            if strict:
                raise RequestError(f"container {name}: {e}") from e
            return None
        if nums is None or nums < 0 or (strict and raw_mem is not None and mem is None):
            if strict:
                raise RequestError(
                    f"container {name}: {names.count} (and {names.memory or 'no memory'}) "
                    "must be whole numbers"
                )
            return None
        if nums == 0:
            return None
        if self.whole:
            return FamilyRequest(WHOLE, nums, 0, 100, 0)
        if mem is None:  # HAMi ignores a fractional memory: the whole card then
            return FamilyRequest(VXPU, nums, CARD_MEMORY, 100, 100)
        size = vxpu_size(mem)
        return FamilyRequest(VXPU, nums, size, 0, size * 100 // CARD_MEMORY)

    def fit(
        self, cards: Sequence[Card], request: FamilyRequest, pod: FitPod, allocated: PodDevices
    ) -> FamilyFit:
        annos = pod.annotations
        mismatched: set[str] = set()

        def card_fits(card: Card) -> bool:
            if not self._uuid_allowed(annos, card.info.id):
                mismatched.add(card.info.id)
                return False
            if self.whole:
                after = card.usage + Usage(1, card.info.devmem, card.info.devcore)
                return (
                    card.usage.used == 0
                    and card.healthy
                    and filtered_out(pod.filters, card.usage.used) is None
                    and _over(True, card.info, after) is None
                )
            if filtered_out(pod.filters, card.usage.used) is not None:
                return False
            return _shares(card, request)

        chosen = select(cards, request.nums, card_fits)
        by_index = {}
        for card in reversed(cards):
            by_index[card.info.index] = card.info  # the first card of an index, as HAMi
        picked = tuple(self._device(by_index[i], request) for i in chosen if i in by_index)
        # HAMi places the pod on whatever the topology named, fewer XPUs than asked where an
        # index is missing; we refuse the node instead.
        if chosen and len(picked) == request.nums:
            return FamilyFit(picked)
        counts: dict[str, int] = {}
        if not self.whole:
            for card in cards:
                why = filtered_out(pod.filters, card.usage.used)
                if why is not None and _shares(card, request):
                    counts[why] = counts.get(why, 0) + 1
        if not counts and mismatched:
            counts[r.CARD_UUID_MISMATCH] = len(mismatched)
        if not counts:
            counts[r.NUMA_NOT_FIT] = 1
        return FamilyFit(None, r.card_reasons(counts, len(cards)))

    def room(self, card: Card, share: ContainerDevices) -> str | None:
        got = _over(self.whole, card.info, card.usage)
        return None if got is None else str(got)

    def _uuid_allowed(self, annotations: Mapping[str, str], uuid: str) -> bool:
        return uuid_allowed(annotations, uuid, self.wire) and uuid_allowed(
            annotations, uuid, _PLUGIN_SELECTION
        )

    def _device(self, info: DeviceInfo, request: FamilyRequest) -> ContainerDevice:
        if self.whole:
            return ContainerDevice(info.id, info.devmem, info.devcore, WHOLE)
        return ContainerDevice(info.id, request.memreq, request.coresreq, VXPU)

    def score_node(self, cards: Sequence[Card], devices: PodDevices, policy: NodePolicy) -> float:
        """HAMi's ScoreNode for whole XPUs: 3000 when the pod's XPUs strand fewer XPUs than
        the node's busy ones do, 2000 as many, 1000 one more, 0 two more. HAMi answers 0 on a
        node that has any other kind of device too; the engine sees only this family's. A pod
        taking none of them takes another kind of device on the node, so HAMi answers 0 there.
        """
        if not self.whole:
            return 0.0
        index = {c.info.id: c.info.index for c in cards}
        mine = sorted({index[d.uuid] for ctr in devices for d in ctr if d.uuid in index})
        if not mine:
            return 0.0
        busy = sorted({c.info.index for c in cards if c.usage.used > 0})
        return {-1: 3000.0, 0: 2000.0, 1: 1000.0, 2: 0.0}.get(
            _bubbles(mine) - _bubbles(busy), 1000.0
        )

    def annotations(self, devices: PodDevices, bind: BindContext = NO_BIND) -> dict[str, str]:
        if not self.whole:
            return encode_allocation(self.wire, devices)
        if not any(devices):
            return {}
        out = {self.wire.allocated_annotation: encode_pod_devices(devices)}
        for container in devices:
            # HAMi writes the key once per container: the last container's XPUs win.
            if container:
                out[DEVICE_INDEX] = ",".join(str(index_suffix(d.uuid)) for d in container)
        return out

    def claim(self, container: Mapping[str, Any], pod: Mapping[str, Any]) -> Claim:
        """HAMi's MutateAdmission: claimed by a count limit; a vXPU's memory limit is
        rounded up to its size, in limits and requests."""
        claim = claim_by_count(container, self.wire)
        memory = self.wire.resources.memory
        limits = (container.get("resources") or {}).get("limits") or {}
        if not claim.claimed or not memory or memory not in limits:
            return claim
        size = str(vxpu_size(quantity_value(limits[memory])))
        return Claim(True, limits=((memory, size),), requests=((memory, size),))


def vxpu_size(memory: int) -> int:
    """HAMi's trimMemory for vXPUs: the smallest size holding `memory` MiB."""
    return next((s for s in VXPU_SIZES if memory <= s), CARD_MEMORY)


def _shares(card: Card, request: FamilyRequest) -> bool:
    """HAMi's FitVXPU: a healthy card with the memory free, idle or shared by vXPUs of the
    same size only (their average is the size asked)."""
    if not card.healthy:
        return False
    usage = card.usage
    if _over(False, card.info, usage + Usage(1, request.memreq, request.coresreq)) is not None:
        return False
    return usage.used == 0 or usage.usedmem // usage.used == request.memreq


def _over(whole: bool, card: DeviceInfo, counted: Usage) -> Over | None:
    """The room rule (hami.engine.checks.beyond) as HAMi's fits count it: a whole XPU by all it
    registered; a vXPU card by its memory alone (FitVXPU's one check: vXPUs of one size on a
    card, which keeps their tasks and cores within it)."""
    u = counted
    return beyond(card, u.used, u.usedmem, u.usedcores, cores=whole, tasks=whole)


def _wire(
    kind: str,
    resources: FamilyResources,
    *,
    register_annotation: str,
    handshake_annotation: str,
    to_allocate_annotation: str,
    allocated_annotation: str,
    lock_name: str | None = None,  # None: HAMi's node lock
) -> FamilyWire:
    wire = FamilyWire(
        type=kind,
        vendor=kind,
        resources=resources,
        register_annotation=register_annotation,
        handshake_annotation=handshake_annotation,
        to_allocate_annotation=to_allocate_annotation,
        allocated_annotation=allocated_annotation,
        use_uuid="hami.io/use-xpu-uuid",  # both families read the vXPU plugin's selection
        nouse_uuid="hami.io/no-use-xpu-uuid",
        reads=(PLUGIN_USE_UUID, PLUGIN_NOUSE_UUID),
    )
    return wire if lock_name is None else replace(wire, lock_name=lock_name)


# The plugin's own selection annotations, which HAMi checks besides the family's.
_PLUGIN_SELECTION = FamilyWire(
    "",
    "",
    FamilyResources(""),
    "",
    "",
    "",
    "",
    use_uuid=PLUGIN_USE_UUID,
    nouse_uuid=PLUGIN_NOUSE_UUID,
)


def from_config(section: Mapping[str, Any]) -> tuple[KunlunFamily, KunlunFamily]:
    """The two families from the `kunlun` section of HAMi's device-config.yaml."""
    whole, vxpu = _resources(section)
    return (
        KunlunFamily(
            _wire(
                WHOLE,
                whole,
                register_annotation="",  # a count in the node's capacity, no card list
                handshake_annotation="",
                to_allocate_annotation="",
                allocated_annotation="hami.io/kunlun-allocated",
                lock_name="",  # HAMi takes no node lock for whole XPUs
            )
        ),
        KunlunFamily(
            _wire(
                VXPU,
                vxpu,
                register_annotation="hami.io/node-register-xpu",
                handshake_annotation="hami.io/node-handshake-xpu",
                to_allocate_annotation="hami.io/xpu-devices-to-allocate",
                allocated_annotation="hami.io/xpu-devices-allocated",
            )
        ),
    )


WHOLE_FAMILY, VXPU_FAMILY = from_config({})
