"""Building node states and turning allocations into card usage."""

from collections.abc import Iterable, Mapping

from hami.engine.families.registry import FAMILIES, Families
from hami.engine.familyscore import unasked_scores
from hami.engine.inventory import PodAllocation
from hami.engine.mig import pod_instances, stray_instances, untrusted
from hami.engine.migalloc import by_card
from hami.engine.model import (
    Card,
    DeviceInfo,
    MigInstance,
    NodeState,
    PodDevices,
    Usage,
    is_nvidia,
)
from hami.engine.policy import NodePolicy
from hami.engine.score import make_card, node_score
from hami.engine.shared import shared


def build_node(
    name: str,
    devices: Iterable[DeviceInfo],
    usage: Mapping[str, Usage] | None = None,
    cordoned: frozenset[str] = frozenset(),
    links: Mapping[str, Mapping[str, int]] | None = None,
    previous: NodeState | None = None,
    families: Iterable[tuple[str, Iterable[DeviceInfo]]] = (),
    holders: Mapping[str, tuple[tuple[str, Mapping[str, str]], ...]] | None = None,
    annotations: Mapping[str, str] | None = None,
    registry: Families = FAMILIES,
) -> NodeState:
    """The node's state; cards unchanged since `previous` (its last state) are reused as they
    are, so a pod arriving costs one card's score, not every card's. `families` are the other
    device families' cards by type (NodeInventory.families); `usage` holds theirs too;
    `holders` the pods holding their cards, where a family reads them (NodeState.holders);
    `annotations` the node's that their node scores read (NodeState.annotations); `registry`
    the families by which the node is ranked (NodeState.binpack_rank)."""
    usage = usage or {}
    before = {c.info.id: c for c in previous.cards} if previous is not None else {}
    # Other vendors' devices never take an NVIDIA request (HAMi matches the word in the type).
    nvidia = [d for d in devices if is_nvidia(d)]
    stray = stray_instances(usage, (d.id for d in nvidia))
    cards = tuple(
        _card(before.get(d.id), d, u, untrusted(d.mig, u, stray))
        for d in nvidia
        for u in (usage.get(d.id, Usage()),)
    )
    if not families:
        score = node_score(cards)
        return NodeState(name, cards, score, score, score, cordoned, links or {})
    if previous is not None:
        before = {c.info.id: c for fc in previous.families.values() for c in fc}
    others = {
        kind: tuple(_card(before.get(d.id), d, usage.get(d.id, Usage()), False) for d in infos)
        for kind, infos in families
    }
    # HAMi's node score sums every device of the node, whichever family.
    score = node_score((*cards, *(c for fc in others.values() for c in fc)))
    unasked = unasked_scores(name, others, annotations or {}, registry)
    return NodeState(
        name,
        cards,
        score,
        score + unasked[NodePolicy.BINPACK],
        score + unasked[NodePolicy.SPREAD],
        cordoned,
        links or {},
        others,
        holders or {},
        annotations or {},
    )


def _card(before: Card | None, info: DeviceInfo, usage: Usage, distrusted: bool) -> Card:
    if (
        before is not None
        and before.untrusted == distrusted
        and before.usage == usage
        and before.info == info
    ):
        return before
    return make_card(info, usage, distrusted)


def pod_usage(
    devices: PodDevices,
    n_init: int,
    init_done: bool = False,
    instances: Mapping[str, tuple[MigInstance, ...]] | None = None,
    mig_cards: frozenset[str] = frozenset(),
) -> dict[str, Usage]:
    """What one pod's allocation takes from each card (HAMi's collapsed usage).

    Init containers run one after another and before the app containers, so a
    card carries the larger of the init peak and the app sum, and at least one
    slot while any container uses it. Once every init container has finished
    only the app containers count.

    MIG instances (`instances`, by card; by default those the devices carry) occupy their
    placements for the pod's whole life, init containers' too, as HAMi's device plugin
    keeps them. A card of `mig_cards` (the node's cards in MIG mode) that the pod holds
    without an instance is counted as `bare`.
    """
    init = () if init_done else devices[:n_init]
    app = devices[n_init:]
    init_mem: dict[str, int] = {}
    init_cores: dict[str, int] = {}
    for container in init:
        for d in container:
            init_mem[d.uuid] = max(init_mem.get(d.uuid, 0), d.usedmem)
            init_cores[d.uuid] = max(init_cores.get(d.uuid, 0), d.usedcores)
    app_slots: dict[str, int] = {}
    app_mem: dict[str, int] = {}
    app_cores: dict[str, int] = {}
    for container in app:
        for d in container:
            app_slots[d.uuid] = app_slots.get(d.uuid, 0) + 1
            app_mem[d.uuid] = app_mem.get(d.uuid, 0) + d.usedmem
            app_cores[d.uuid] = app_cores.get(d.uuid, 0) + d.usedcores
    held = pod_instances(devices) if instances is None else instances
    out = {}
    for uuid in dict.fromkeys([*init_mem, *app_slots]):
        mig = held.get(uuid, ())
        out[uuid] = shared(
            Usage(
                used=max(app_slots.get(uuid, 0), 1),
                usedmem=max(init_mem.get(uuid, 0), app_mem.get(uuid, 0)),
                usedcores=max(init_cores.get(uuid, 0), app_cores.get(uuid, 0)),
                mig=mig,
                bare=int(not mig and uuid in mig_cards),
            )
        )
    for uuid, mig in held.items():
        if uuid not in out and mig:
            out[uuid] = Usage(mig=mig)
    return out


def mig_cards(node: NodeState | None) -> frozenset[str]:
    return frozenset() if node is None else frozenset(c.info.id for c in node.cards if c.info.mig)


def mig_devices(devices: Iterable[DeviceInfo]) -> frozenset[str]:
    """mig_cards of the state `devices` build: what counting a pod needs of its node, without
    building the node."""
    return frozenset(d.id for d in devices if d.mig and is_nvidia(d))


def held(alloc: PodAllocation, mig: frozenset[str]) -> dict[str, Usage]:
    """What a pod's allocation annotations take from each card of its node; `mig` are the
    node's cards in MIG mode. The other families' cards are counted as NVIDIA's without MIG."""
    usage = pod_usage(alloc.devices, alloc.n_init, alloc.init_done, by_card(alloc.mig), mig)
    if alloc.family_devices:
        usage.update(pod_usage(alloc.family_devices, alloc.n_init, alloc.init_done, {}))
    return usage
