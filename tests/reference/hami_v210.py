"""A reference model of HAMi v2.10's placement, for comparing decisions: a test double, not product code.

Written from ../shared/reference/hami-scheduler-spec.md (sections 2, 4.2, 5, 6, 7) and
HAMi v2.10's pkg/scheduler/score.go, pkg/scheduler/policy/gpu_policy.go and
pkg/device/nvidia/device.go (Fit), following their structure on purpose: one
mutable card list per node that is scored, then sorted in place by a literal
insertion sort with HAMi's Less, per container, and walked from the tail; init
containers on copies; the node chosen from the sorted fitting nodes. It shares
no placement code with hami.engine, so where the two agree the engine does
what HAMi does. NVIDIA hami-core cards only; no type/UUID selectors, cordons,
topology or MIG.

Where HAMi is not deterministic, or where hami-py differs on purpose, the model
does what hami-py does and names the entry of DELIBERATE_DIFFERENCES it
follows; that table is the one list of deliberate differences (the README's
"Migrating from HAMi" section repeats it for users).
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from hami.engine.f32 import f32

DELIBERATE_DIFFERENCES: Mapping[str, str] = {
    "tied-nodes": (
        "Nodes with equal scores: HAMi fits nodes in goroutines and sorts them with an unstable "
        "sort, so which one wins is random; hami-py takes the first by name."
    ),
    "tied-cards-start-order": (
        "Cards that tie on every sort key: HAMi keeps them in the order of the node annotation, "
        "which its device plugin writes in Go map order (a new order on rescans); hami-py starts "
        "from device index order, the same answer whenever the annotation lists cards by index."
    ),
    "more-than-12-cards": (
        "On a node with more than 12 cards Go's sort is pdqsort, which is not stable; hami-py "
        "keeps ties in order (stable) at any size."
    ),
    "policy-names": (
        "A GPU policy name in the wrong case (Binpack) or unknown: HAMi silently uses spread "
        "(unknown node policy: binpack); hami-py refuses the pod at creation naming the valid ones."
    ),
    "scoring-weights": (
        "A malformed hami.io/device-scoring-weights: HAMi lets the pod in and fails every filter "
        "(calcScore error); hami-py refuses the pod at creation with the expected form."
    ),
    "gpu-less-entries": (
        "GPU-less containers: HAMi v2.10 leaves their entry out of the allocation string (it pads "
        "under the card model, not NVIDIA); hami-py writes an empty entry per container, the form "
        "HAMi's device plugin maps to container names by position, and reads both."
    ),
    "zero-gpu-bind": (
        "nvidia.com/gpu: 0 beside gpumem: both bind without a lock or allocation; HAMi also "
        "writes bind-phase allocating (never completed by anyone), hami-py writes nothing."
    ),
    "gpumem-suffix": (
        "gpumem with a byte suffix (1Gi, 1000Mi, 2G): HAMi reads the number as MiB (1Gi is "
        "2^30 MiB, no card fits); hami-py reads the bytes and refuses a value that is not a whole "
        "MiB."
    ),
}

PCT_UNSET = 101


@dataclass(frozen=True)
class Card:
    """One entry of the node annotation."""

    uuid: str
    index: int
    count: int
    devmem: int
    devcore: int = 100
    numa: int = 0
    health: bool = True


@dataclass(frozen=True)
class Ask:
    """A container's ContainerDeviceRequest: mem MiB (0: use pct), pct 101 when unset."""

    nums: int
    mem: int = 0
    pct: int = PCT_UNSET
    cores: int = 0


@dataclass(frozen=True)
class Pod:
    init: tuple[Ask | None, ...]
    app: tuple[Ask | None, ...]
    gpu_policy: str = "spread"
    node_policy: str = "binpack"
    weights: tuple[int, int, int] = (1, 1, 1)  # slot, core, memory
    numa_bind: bool = False


# (uuid, MiB, cores) per card, per container (init first, GPU-less containers empty).
Devices = tuple[tuple[tuple[str, int, int], ...], ...]


@dataclass
class Usage:
    card: Card
    used: int = 0
    usedmem: int = 0
    usedcores: int = 0
    score: float = 0.0

    def copy(self) -> "Usage":
        return replace(self)


@dataclass
class Cluster:
    nodes: dict[str, list[Card]]
    pods: dict[str, tuple[str, Devices, int]] = field(
        default_factory=dict
    )  # name -> node, devs, n_init


def _collapsed(devices: Devices, n_init: int) -> dict[str, tuple[int, int, int]]:
    """CollapseInitContainerUsage: per card (slots, MiB, cores)."""
    init_mem: dict[str, int] = {}
    init_cores: dict[str, int] = {}
    for ctr in devices[:n_init]:
        for uuid, mem, cores in ctr:
            init_mem[uuid] = max(init_mem.get(uuid, 0), mem)
            init_cores[uuid] = max(init_cores.get(uuid, 0), cores)
    slots: dict[str, int] = {}
    mem_sum: dict[str, int] = {}
    core_sum: dict[str, int] = {}
    for ctr in devices[n_init:]:
        for uuid, mem, cores in ctr:
            slots[uuid] = slots.get(uuid, 0) + 1
            mem_sum[uuid] = mem_sum.get(uuid, 0) + mem
            core_sum[uuid] = core_sum.get(uuid, 0) + cores
    return {
        u: (
            max(slots.get(u, 0), 1),
            max(init_mem.get(u, 0), mem_sum.get(u, 0)),
            max(init_cores.get(u, 0), core_sum.get(u, 0)),
        )
        for u in {*init_mem, *slots}
    }


def usage_view(cluster: Cluster) -> dict[str, list[Usage]]:
    """getNodesUsage: every node from zero, then every cached pod added onto its node's cards."""
    view = {name: [Usage(c) for c in cards] for name, cards in cluster.nodes.items()}
    for node, devices, n_init in cluster.pods.values():
        for uuid, (slots, mem, cores) in _collapsed(devices, n_init).items():
            for u in view.get(node, ()):
                if u.card.uuid == uuid:
                    u.used += slots
                    u.usedmem += mem
                    u.usedcores += cores
    return view


def compute_score(u: Usage, weights: tuple[int, int, int]) -> float:
    """ComputeScore for NVIDIA in v2.9-v2.10: the request's type never equals the card model,
    so only existing usage counts."""
    c = u.card
    if c.count == 0 or c.devcore == 0 or c.devmem == 0:
        return 0.0
    used = f32(f32(u.used) / f32(c.count))
    core = f32(f32(u.usedcores) / f32(c.devcore))
    mem = f32(f32(u.usedmem) / f32(c.devmem))
    ws, wc, wm = (f32(w) for w in weights)
    return f32(f32(10) * f32(f32(f32(ws * used) + f32(wc * core)) + f32(wm * mem)))


def node_score(cards: Sequence[Usage]) -> float:
    used = sum(u.used for u in cards)
    cores = sum(u.usedcores for u in cards)
    mem = sum(u.usedmem for u in cards)
    total = sum(u.card.count for u in cards)
    total_core = sum(u.card.devcore for u in cards)
    total_mem = sum(u.card.devmem for u in cards)
    if total == 0 or total_core == 0 or total_mem == 0:
        return 0.0
    s = f32(f32(f32(used) / f32(total)) + f32(f32(cores) / f32(total_core)))
    return f32(f32(10) * f32(s + f32(f32(mem) / f32(total_mem))))


def _chain(policy: str) -> list[str]:
    keys: list[str] = []
    for token in policy.split(","):
        name = token.strip()
        if name in ("binpack", "spread", "numa") and name not in keys:
            keys.append(name)
    return keys


def less(policy: str, numa_bind: bool) -> Callable[[Usage, Usage], bool]:
    """DeviceUsageList.Less."""
    if "," in policy or policy == "numa":
        chain = _chain(policy) or ["spread"]
        if numa_bind and chain[0] != "numa":
            chain = ["numa", *(k for k in chain if k != "numa")]

        def by_chain(a: Usage, b: Usage) -> bool:
            for key in chain:
                if key == "binpack" and a.score != b.score:
                    return a.score < b.score
                if key == "spread" and a.score != b.score:
                    return a.score > b.score
                if key == "numa" and a.card.numa != b.card.numa:
                    return a.card.numa < b.card.numa
            return a.card.index < b.card.index

        return by_chain

    def single(a: Usage, b: Usage) -> bool:
        si, sj, ni, nj = a.score, b.score, a.card.numa, b.card.numa
        if policy == "mutex":
            return a.used > b.used if a.used != b.used else ni < nj
        if numa_bind:
            if policy == "binpack":
                return si < sj if ni == nj else ni > nj
            return si > sj if ni == nj else ni < nj
        if policy == "binpack":
            return si < sj if si != sj else ni < nj
        return si > sj if si != sj else ni < nj

    return single


def insertion_sort(items: list[Usage], lt: Callable[[Usage, Usage], bool]) -> None:
    """Go's sort.Sort for 12 elements or fewer, literally."""
    for i in range(1, len(items)):
        j = i
        while j > 0 and lt(items[j], items[j - 1]):
            items[j], items[j - 1] = items[j - 1], items[j]
            j -= 1


def _gen_reason(reasons: Mapping[str, int], cards: int) -> str:
    return ", ".join(sorted(f"{n}/{cards} {r}" for r, n in reasons.items()))


def fit(cards: Sequence[Usage], ask: Ask, pod: Pod) -> tuple[list[Usage], list[int]] | str:
    """NvidiaGPUDevices.Fit over the sorted list, from the tail: (cards, MiB each) or the reason."""
    nums, prev_numa = ask.nums, -1
    taken: list[Usage] = []
    mems: list[int] = []
    reasons: dict[str, int] = {}
    mutex = "mutex" in [t.strip() for t in pod.gpu_policy.split(",")]
    cores = min(ask.cores, 100)

    def no(reason: str) -> None:
        reasons[reason] = reasons.get(reason, 0) + 1

    for u in reversed(cards):
        c = u.card
        if not c.health:
            no("CardNotHealth")
            continue
        if pod.numa_bind and prev_numa != c.numa:
            if nums != ask.nums:
                reasons["NumaNotFit"] = reasons.get("NumaNotFit", 0) + len(taken)
            nums, prev_numa, taken, mems = ask.nums, c.numa, [], []
        if c.count <= u.used:
            no("CardTimeSlicingExhausted")
            continue
        if mutex and u.used > 0:
            no("ExclusiveDeviceAllocateConflict")
            continue
        mem = ask.mem if ask.mem > 0 else (c.devmem * ask.pct // 100 if ask.pct != PCT_UNSET else 0)
        if c.devmem - u.usedmem < mem:
            no("CardInsufficientMemory")
            continue
        if c.devcore - u.usedcores < cores:
            no("CardInsufficientCore")
            continue
        if c.devcore == 100 and cores == 100 and u.used > 0:
            no("ExclusiveDeviceAllocateConflict")
            continue
        if c.devcore != 0 and u.usedcores == c.devcore and cores == 0:
            no("CardComputeUnitsExhausted")
            continue
        taken.append(u)
        mems.append(mem)
        nums -= 1
        if nums == 0:
            return taken, mems
    if taken:
        reasons["AllocatedCardsInsufficientRequest"] = len(taken)
    return _gen_reason(reasons, len(cards))


def fit_in_devices(cards: list[Usage], ask: Ask, pod: Pod) -> Devices | str:
    """fitInDevices for one container: score, sort the shared list in place, Fit, add usage."""
    for u in cards:
        u.score = compute_score(u, pod.weights)
    # Nodes here never carry more than 12 cards ("more-than-12-cards").
    insertion_sort(cards, less(pod.gpu_policy, pod.numa_bind))
    if ask.nums > len(cards):
        return "NodeInsufficientDevice"
    got = fit(cards, ask, pod)
    if isinstance(got, str):
        return got
    taken, mems = got
    cores = min(ask.cores, 100)
    for u, mem in zip(taken, mems, strict=True):
        u.used += 1
        u.usedmem += mem
        u.usedcores += cores
    return (tuple((u.card.uuid, mem, cores) for u, mem in zip(taken, mems, strict=True)),)


def score_node(cards: list[Usage], pod: Pod) -> tuple[Devices, float] | str:
    """scoreNode: init containers each on a copy, app containers on one shared copy."""
    out: list[tuple[tuple[str, int, int], ...]] = []
    for ask in pod.init:
        if ask is None:
            out.append(())  # "gpu-less-entries"
            continue
        got = fit_in_devices([u.copy() for u in cards], ask, pod)
        if isinstance(got, str):
            return got
        out.extend(got)
    app = [u.copy() for u in cards]
    score = node_score(app)
    for ask in pod.app:
        if ask is None:
            out.append(())
            continue
        got = fit_in_devices(app, ask, pod)
        if isinstance(got, str):
            return got
        out.extend(got)
    return tuple(out), score


@dataclass(frozen=True)
class Decision:
    node: str | None
    devices: Devices | None
    failed: Mapping[str, str]


def filter_pod(cluster: Cluster, pod: Pod, candidates: Sequence[str]) -> Decision:
    """Scheduler.Filter: unknown names unregistered, every node scored, the last after sorting."""
    view = usage_view(cluster)
    failed: dict[str, str] = {}
    fitting: list[tuple[str, float, Devices]] = []
    # Start-card order: by device index ("tied-cards-start-order").
    for name in candidates:
        if name not in view:
            failed[name] = "node unregistered"
            continue
        got = score_node(sorted(view[name], key=lambda u: u.card.index), pod)
        if isinstance(got, str):
            failed[name] = got
        else:
            fitting.append((name, got[1], got[0]))
    if not fitting:
        return Decision(None, None, failed)
    # NodeScoreList.Less: spread descending, anything else ascending; the last one wins.
    # Ties: the first by name ("tied-nodes"), i.e. sorted last among equals here.
    fitting.sort(key=lambda f: f[0], reverse=True)
    spread = pod.node_policy == "spread"
    fitting.sort(key=lambda f: -f[1] if spread else f[1])
    name, _, devices = fitting[-1]
    return Decision(name, devices, failed)
