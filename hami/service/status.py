"""`hami status`: every node's cards as the scheduler counts them, the pods on them, and the GPU
pods still waiting, from one list of nodes and pods (the same cache the extender decides with).

Nothing is reserved or written; `hami.runtime.status` reads the cluster and draws this.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from hami.cache.store import ClusterCache
from hami.engine import nvidianames
from hami.engine.asks import pod_request
from hami.engine.dra.device import DraDevice
from hami.engine.dra.overcommit import past_capacity, warning
from hami.engine.dra.slices import card_info
from hami.engine.families.registry import Families
from hami.engine.inventory import is_terminal
from hami.engine.mig import label
from hami.engine.migalloc import summary
from hami.engine.model import Usage
from hami.engine.requests import RequestError, ResourceDefaults
from hami.service.annotations import written_cards


@dataclass(frozen=True)
class Holder:
    namespace: str
    pod: str
    container: int  # index in the allocation, init containers first
    memory: int  # MiB
    cores: int
    mig: str = ""  # on a card in MIG mode, the instance (`3g.20gb@4-7`)
    # A pod the scheduler did not place, counted as this whole card (hami.engine.outside).
    outside: bool = False
    # An allocated DRA claim (`pod` is the claim's name), counted as what it consumed.
    claim: bool = False


@dataclass(frozen=True)
class CardStatus:
    index: int
    uuid: str
    type: str
    healthy: bool
    memory: tuple[int, int]  # (allocated, total) MiB
    cores: tuple[int, int]  # (allocated, total) percent of SMs
    slots: tuple[int, int]  # (containers sharing it, the device plugin's split count)
    holders: tuple[Holder, ...]
    # Which world the card is in: "device-plugin", "dra" (a DRA driver's slice only) or "both".
    source: str = "device-plugin"
    # On a card of both worlds, what is counted past its capacity ("" when nothing is).
    overcommitted: str = ""


@dataclass(frozen=True)
class NodeStatus:
    name: str
    cards: tuple[CardStatus, ...]


@dataclass(frozen=True)
class GpuPod:
    namespace: str
    name: str
    node: str | None
    allocated: str | None  # hami.io/vgpu-devices-allocated, as the lab's lab-card prints it
    pending: str | None  # kube-scheduler's PodScheduled message while the pod waits
    mig: str | None = None  # hami.io/vgpu-mig-allocations, on cards in MIG mode


@dataclass(frozen=True)
class Status:
    nodes: tuple[NodeStatus, ...]
    pods: tuple[GpuPod, ...]
    unregistered: int  # nodes without HAMi's registration (no GPUs for this scheduler)

    @property
    def pending(self) -> tuple[GpuPod, ...]:
        return tuple(p for p in self.pods if p.node is None)


NOT_TRIED = "not tried by the scheduler yet"


def status(
    cache: ClusterCache,
    pods: Iterable[Mapping[str, Any]],
    resources: ResourceDefaults,
) -> Status:
    """`cache` was filled from `pods` and the nodes: its usage is the scheduler's count."""
    holders: dict[tuple[str, str], list[Holder]] = {}
    for alloc in cache.pods():
        for index, container in enumerate(alloc.all_devices()):
            for d in container:
                instance = "" if d.mig is None else label(d.mig)
                holders.setdefault((alloc.node, d.uuid), []).append(
                    Holder(alloc.namespace, alloc.name, index, d.usedmem, d.usedcores, instance)
                )
    dra = {(d.node, d.uuid): d for d in cache.dra.devices()}
    for node_name in {n for n, _ in dra}:
        for namespace, claim, usage in cache.dra.claims_on(node_name):
            for uuid, u in usage.items():
                holders.setdefault((node_name, uuid), []).append(
                    Holder(namespace, claim, 0, u.usedmem, u.usedcores, claim=True)
                )
    for node in cache.view.values():
        for uuid, claims in cache.outside_cards(node.name).items():
            card = next(c.info for c in node.all_cards() if c.info.id == uuid)
            holders.setdefault((node.name, uuid), []).extend(
                Holder(c.namespace, c.name, 0, card.devmem, card.devcore, outside=True)
                for c in claims
            )
    nodes = tuple(
        NodeStatus(
            node.name,
            tuple(
                CardStatus(
                    c.info.index,
                    c.info.id,
                    c.info.type,
                    c.healthy and c.info.id not in node.cordoned,
                    (c.usage.usedmem, c.info.devmem),
                    (c.usage.usedcores, c.info.devcore),
                    (c.usage.used, c.info.count),
                    tuple(sorted(holders.get((node.name, c.info.id), ()), key=_holder_key)),
                    "both" if (node.name, c.info.id) in dra else "device-plugin",
                    past_capacity(c.usage, c.info) if (node.name, c.info.id) in dra else "",
                )
                # NVIDIA's cards by index, then each other family's (the TYPE column tells them)
                for c in (
                    *sorted(node.cards, key=lambda c: c.info.index),
                    *(c for fc in node.families.values() for c in fc),
                )
            ),
        )
        for node in sorted(cache.view.values(), key=lambda n: n.name)
    )
    nodes = _with_dra_only(nodes, dra, cache.dra.usage(), holders)
    gpu_pods = sorted(
        (p for pod in pods if (p := _gpu_pod(pod, resources, cache.families)) is not None),
        key=lambda p: (p.namespace, p.name),
    )
    return Status(nodes, tuple(gpu_pods), len(cache.unregistered))


def _with_dra_only(
    nodes: tuple[NodeStatus, ...],
    dra: Mapping[tuple[str, str], DraDevice],
    usage: Mapping[str, Mapping[str, Usage]],
    holders: Mapping[tuple[str, str], list[Holder]],
) -> tuple[NodeStatus, ...]:
    """The nodes with the cards only a DRA driver publishes added (a node of its own where the
    device plugin registered none there)."""
    shown = {(n.name, c.uuid) for n in nodes for c in n.cards}
    extra: dict[str, list[CardStatus]] = {}
    for (node, uuid), d in sorted(dra.items(), key=lambda kv: (kv[0][0], kv[1].index)):
        if (node, uuid) in shown:
            continue
        info, u = card_info(d), usage.get(node, {}).get(uuid, Usage())
        extra.setdefault(node, []).append(
            CardStatus(
                info.index,
                uuid,
                info.type,
                True,
                (u.usedmem, info.devmem),
                (u.usedcores, info.devcore),
                (u.used, info.count),
                tuple(sorted(holders.get((node, uuid), ()), key=_holder_key)),
                "dra",
            )
        )
    if not extra:
        return nodes
    merged = {n.name: n for n in nodes}
    for name, cards in extra.items():
        have = merged[name].cards if name in merged else ()
        merged[name] = NodeStatus(name, (*have, *cards))
    return tuple(merged[name] for name in sorted(merged))


def _holder_key(h: Holder) -> tuple[str, str, int]:
    return h.namespace, h.pod, h.container


def _gpu_pod(
    pod: Mapping[str, Any], resources: ResourceDefaults, families: Families
) -> GpuPod | None:
    if is_terminal(pod):
        return None
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = meta.get("annotations") or {}
    allocated = written_cards(annotations, families)
    try:
        wants = pod_request(spec, resources, families=families).wants_gpu
    except RequestError:
        wants = True  # asks for more than a pod may: still a GPU pod, which waits
    if not wants and allocated is None:
        return None
    node = spec.get("nodeName") or None
    return GpuPod(
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
        node,
        allocated,
        None if node else _scheduling_message(pod),
        annotations.get(nvidianames.MIG_ALLOCATIONS),
    )


def _scheduling_message(pod: Mapping[str, Any]) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or NOT_TRIED)
    return NOT_TRIED


def lab_card(rows: Sequence[tuple[str, str | None]], mig: Sequence[str | None] = ()) -> list[str]:
    """`name   allocation` lines as Lab 14's lab-card helper prints them (kubectl custom
    columns without headers: three spaces after the longest name, `<none>` when unset).

    `mig` holds each pod's hami.io/vgpu-mig-allocations; when some pod has one, a third
    column shows its profiles and slices (`3g.20gb@4-7`)."""
    width = max((len(name) for name, _ in rows), default=0) + 3
    lines = [f"{name:<{width}}{allocated or '<none>'}" for name, allocated in rows]
    shown = [summary(m) for m in mig]
    if not any(shown):
        return lines
    second = max(len(allocated or "<none>") for _, allocated in rows) + 3
    return [
        f"{name:<{width}}{allocated or '<none>':<{second}}{text or '<none>'}"
        for (name, allocated), text in zip(rows, shown, strict=True)
    ]


def render_text(s: Status) -> list[str]:
    lines: list[str] = []
    for node in s.nodes:
        lines.append(f"NODE {node.name}")
        lines.extend("  " + row for row in _table(_card_rows(node.cards)))
        lines.append("")
    if s.unregistered:
        lines += [f"{s.unregistered} more node(s) without HAMi's GPU registration", ""]
    for namespace in sorted({p.namespace for p in s.pods}):
        lines.append(f"PODS {namespace}")
        shown = [p for p in s.pods if p.namespace == namespace]
        lines.extend(lab_card([(p.name, p.allocated) for p in shown], [p.mig for p in shown]))
        lines.append("")
    lines.append(f"PENDING GPU PODS: {len(s.pending) or 'none'}")
    lines.extend(f"  {p.namespace}/{p.name}: {p.pending}" for p in s.pending)
    over = [(n.name, c) for n in s.nodes for c in n.cards if c.overcommitted]
    if over:
        lines += ["", f"OVER-COMMITTED CARDS: {len(over)}"]
        lines.extend(f"  {warning(node, c.uuid, c.overcommitted)}" for node, c in over)
    return lines


def _card_rows(cards: Sequence[CardStatus]) -> list[list[str]]:
    rows = [["CARD", "UUID", "TYPE", "MEMORY MiB", "CORES %", "SLOTS", "PODS"]]
    for c in cards:
        rows.append(
            [
                str(c.index),
                c.uuid,
                (c.type if c.healthy else f"{c.type} (unhealthy)")
                + ("" if c.source == "device-plugin" else f" [{c.source}]"),
                f"{c.memory[0]}/{c.memory[1]}",
                f"{c.cores[0]}/{c.cores[1]}",
                # A DRA driver bounds no number of sharers: no split count to show.
                f"{c.slots[0]}/{c.slots[1] or '-'}",
                " ".join(_holder_text(h) for h in c.holders) or "-",
            ]
        )
    return rows


def _holder_text(h: Holder) -> str:
    text = f"{h.namespace}/{h.pod}" + (f" {h.mig}" if h.mig else "")
    if h.claim:
        return f"{text}(claim)"
    return f"{text}(outside)" if h.outside else text


def _table(rows: list[list[str]]) -> list[str]:
    """Columns two spaces apart; the numbers (memory, cores, slots) right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    numeric = {3, 4, 5}
    return [
        "  ".join(
            cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ).rstrip()
        for row in rows
    ]


def render_json(s: Status) -> dict[str, Any]:
    return {
        "nodes": [{"name": n.name, "cards": [_card_json(c) for c in n.cards]} for n in s.nodes],
        "pods": [asdict(p) for p in s.pods],
        "pending": [asdict(p) for p in s.pending],
        "unregistered_nodes": s.unregistered,
    }


def _card_json(c: CardStatus) -> dict[str, Any]:
    return {
        "index": c.index,
        "uuid": c.uuid,
        "type": c.type,
        "healthy": c.healthy,
        "source": c.source,
        "overcommitted": c.overcommitted,
        "memory_mib": {"allocated": c.memory[0], "total": c.memory[1]},
        "cores_percent": {"allocated": c.cores[0], "total": c.cores[1]},
        "slots": {"used": c.slots[0], "total": c.slots[1]},
        "pods": [asdict(h) for h in c.holders],
    }
