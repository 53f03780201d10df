"""The series that say which world each card is in and what DRA claims hold of it.

HAMi's per-card series keep their names and labels (hami.runtime.exposition) and already carry
the claims' share, summed into each card a device plugin registered. These add, per card of
either world: `hami_gpu_source_info` (1, with `source` "device-plugin", "dra" or "both", the
card matched by UUID), and, per card a DRA driver publishes, its capacity and what the
allocated claims consume of it (a card only a DRA driver publishes shows up only here), and,
per card of both worlds, `hami_gpu_overcommitted`: 1 while more is counted on it than it has
(hami.engine.dra.overcommit: kube-scheduler's allocator placed a claim beside HAMi's
device-plugin pods, which it does not see).
"""

from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from hami.cache.store import ClusterCache
from hami.engine.dra.device import DraDevice
from hami.engine.dra.overcommit import REMEDY, past_capacity
from hami.engine.model import NodeState, Usage
from hami.runtime.promtext import go_float, header, label_text

MIB = 2**20
SOURCE_HELP = (
    "1 per card: source says whether HAMi's device plugin registered it (device-plugin), a DRA "
    "driver published it (dra), or both (the same UUID)"
)
SERIES = (
    ("hami_dra_gpu_memory_limit_bytes", "Memory of a card a DRA driver publishes, bytes"),
    (
        "hami_dra_gpu_memory_allocated_bytes",
        "Memory the allocated DRA claims consume on the card, bytes",
    ),
    (
        "hami_dra_gpu_core_allocated_ratio",
        "Cores the allocated DRA claims consume on the card, percent of its SMs",
    ),
    ("hami_dra_gpu_claims", "Allocated DRA claims holding the card"),
)
OVER_HELP = (
    "1 per card both worlds serve while more memory or cores are counted on it than it has, "
    f"else 0: {REMEDY}"
)


@dataclass(frozen=True)
class DraSnapshot:
    """Taken on the event loop: immutable records and copies only."""

    devices: tuple[DraDevice, ...]
    usage: Mapping[str, Mapping[str, Usage]]


NO_DRA = DraSnapshot((), {})


def dra_snapshot(cache: ClusterCache) -> DraSnapshot:
    return DraSnapshot(tuple(cache.dra.devices()), cache.dra.usage())


def source_of(node: NodeState, published: AbstractSet[str]) -> Iterator[tuple[str, str, str]]:
    """(uuid, model, source) of each card of the node the device plugin registered."""
    for card in node.all_cards():
        yield card.info.id, card.info.type, "both" if card.info.id in published else "device-plugin"


def dra_lines(nodes: Iterable[NodeState], snap: DraSnapshot) -> Iterator[str]:
    published: dict[str, set[str]] = {}
    for d in snap.devices:
        published.setdefault(d.node, set()).add(d.uuid)
    registered: set[tuple[str, str]] = set()
    both: list[tuple[str, str, bool]] = []
    yield header("hami_gpu_source_info", SOURCE_HELP)
    for node in nodes:
        on_node = published.get(node.name, set())
        for uuid, model, source in source_of(node, on_node):
            registered.add((node.name, uuid))
            text = _labels(node.name, uuid, model, source)
            yield f"hami_gpu_source_info{text} 1.0\n"
        both.extend(
            (node.name, c.info.id, bool(past_capacity(c.usage, c.info)))
            for c in node.all_cards()
            if c.info.id in on_node
        )
    for d in snap.devices:
        if (d.node, d.uuid) not in registered:
            yield f"hami_gpu_source_info{_labels(d.node, d.uuid, d.product or d.kind, 'dra')} 1.0\n"
    yield header("hami_gpu_overcommitted", OVER_HELP)
    for name, uuid, over in both:
        text = label_text([("node", name), ("device_uuid", uuid)])
        yield f"hami_gpu_overcommitted{text} {go_float(int(over))}\n"
    rows = [
        (
            label_text([("node", d.node), ("device_uuid", d.uuid)]),
            (d.memory * MIB, used.usedmem * MIB, used.usedcores, used.used),
        )
        for d in snap.devices
        for used in (snap.usage.get(d.node, {}).get(d.uuid, Usage()),)
    ]
    for index, (name, help_text) in enumerate(SERIES):
        yield header(name, help_text)
        for text, values in rows:
            yield f"{name}{text} {go_float(values[index])}\n"


def _labels(node: str, uuid: str, model: str, source: str) -> str:
    return label_text(
        [("node", node), ("device_uuid", uuid), ("device_type", model), ("source", source)]
    )
