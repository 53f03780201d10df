"""A reference model of HAMi v2.10's placement, for comparing decisions: a test double, not product code.

Written from ../shared/reference/hami-scheduler-spec.md (sections 2, 4.2, 5, 6, 7) and
HAMi v2.10's pkg/scheduler/score.go, pkg/scheduler/policy/gpu_policy.go and
pkg/device/nvidia/device.go (Fit), following their structure on purpose: one
mutable card list per node that is scored, then sorted in place by a literal
insertion sort with HAMi's Less, per container, and walked from the tail; init
containers on copies; the node chosen from the sorted fitting nodes. It shares
no placement code with hami.engine, so where the two agree the engine does
what HAMi does. NVIDIA cards in hami-core and in dynamic MIG mode (the MIG rules
are in hami_v210_mig), `nvidia.com/vgpu-mode`; no type/UUID selectors, cordons,
topology, quotas, or cards in mps mode.

Where HAMi is not deterministic, or where hami-py differs on purpose, the model
does what hami-py does and names the entry of DELIBERATE_DIFFERENCES it
follows; that table is the one list of deliberate differences (docs/migrate-from-hami.md
repeats it for users).
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from hami.engine.f32 import f32
from tests.reference import hami_v210_mig as hmig

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
        "HAMi's device plugin maps to container names by position, and reads both. The "
        "containerIndex of hami.io/vgpu-mig-allocations counts the same positions, so it is the "
        "index the device plugin looks the container up by (init containers first)."
    ),
    "zero-gpu-bind": (
        "nvidia.com/gpu: 0 beside gpumem: both bind without a lock or allocation; HAMi also "
        "writes bind-phase allocating (never completed by anyone), hami-py writes nothing."
    ),
    "gpu-pod-escapes": (
        "A GPU pod with spec.nodeName, a privileged container, SYS_ADMIN, a /dev host path or "
        "NVIDIA_VISIBLE_DEVICES in any container: HAMi checks only its own pods, and only some of "
        "that (a foreign schedulerName or the pod's ignore label skip it all); hami-py refuses "
        "it for every GPU pod at creation (hami.engine.escapes)."
    ),
    "overwrite-env": (
        "overwriteEnv: HAMi's is off by default and, on, writes NVIDIA_VISIBLE_DEVICES=none into "
        "every pod reaching its webhook; hami-py's is on by default and writes it into GPU pods "
        "only, with NVIDIA_DRIVER_CAPABILITIES=compute,utility in every GPU container "
        "(hami.engine.pins)."
    ),
    "gpu-pod-channels": (
        "A GPU pod with a writable host path of the driver or HAMi-core folders, hostPID, "
        "SYS_RAWIO, or a nvidia.cdi.k8s.io/ or devices.gke.io/ annotation: HAMi admits it; "
        "hami-py refuses it at creation (hami.engine.escapes, hami.engine.hostpaths)."
    ),
    "pods-outside-the-scheduler": (
        "A bound pod holding nvidia.com/gpu without an allocation of the scheduler's: HAMi counts "
        "nothing on its cards; hami-py counts that many whole cards (hami.engine.outside)."
    ),
    "bound-allocation-edits": (
        "An allocation edited after bind: HAMi counts what is written now; hami-py keeps "
        "counting what the pod was bound with (hami.engine.trust)."
    ),
    "gpumem-suffix": (
        "gpumem with a byte suffix (1Gi, 1000Mi, 2G): HAMi reads the number as MiB (1Gi is "
        "2^30 MiB, no card fits); hami-py reads the bytes and refuses a value that is not a whole "
        "MiB."
    ),
    "mig-whole-card": (
        "A whole-card request on a MIG card (nvidia.com/gpu alone, or gpumem-percentage: 100): "
        "HAMi takes the percentage of the registered memory, which is above every profile's "
        "(40,960 against 40,192 MiB on an A100-40GB), so it fits no MIG card, even an empty one "
        "(CardMigTopologyInfeasible); hami-py takes a percentage of a MIG card of its largest "
        "profile, so the whole card is the largest profile (7g.40gb)."
    ),
    "mig-cores": (
        "nvidia.com/gpucores on a MIG card: HAMi checks it against the card's free cores, then "
        "gives the smallest profile by memory alone and counts that profile's cores (gpucores "
        "50 with 4000 MiB gets a 1g.5gb, 15 % of the SMs); hami-py gives the smallest profile "
        "whose memory and cores both cover the request (here 7g.40gb on an A100)."
    ),
    "mig-reason-counts": (
        "Reasons on MIG cards: HAMi counts the instances a container collected "
        "(AllocatedCardsInsufficientRequest, NumaNotFit) and counts a MIG card again when it "
        "runs out of placements after giving some, so counts exceed the cards "
        "(`5/2 AllocatedCardsInsufficientRequest`); hami-py counts each card once: under "
        "AllocatedCardsInsufficientRequest (or NumaNotFit) if it gave the container anything, "
        "else under the first check it failed."
    ),
    "percentage-refusal": (
        "nvidia.com/gpumem-percentage outside 0..100: both refuse the pod at creation with the "
        "same message; HAMi's webhook answers it as its own error (500), hami-py as a denial "
        "(403 Forbidden), since the pod is wrong, not the webhook."
    ),
    "several-quotas": (
        "Several ResourceQuotas with GPU limits in one namespace: HAMi applies whichever it saw "
        "last (deleting that one lifts the limit); hami-py applies all, the tightest winning, "
        "as Kubernetes does."
    ),
    "no-allocatable": (
        "A node whose kubelet advertises no nvidia.com/gpu beside HAMi's register annotation: "
        "HAMi v2.10 registers it when its handshake is not Requesting_ (none, Deleted_, "
        "Reported) and it never reported cards before, or once it has reported none, and every "
        "pod placed there fails at the kubelet; hami-py reports it unregistered, saying why "
        "(tests/reference/hami_v210_register.py)."
    ),
    "init-gpu-lock": (
        "A pod whose only GPU is an init container's: HAMi binds it without the node lock (it "
        "looks at app containers only), so its device plugin's Allocate can find the next pod "
        "bound to the node through that pod's lock and hand the init container the wrong card; "
        "hami-py takes the lock whenever any container gets a device."
    ),
    "mig-quota": (
        "A namespace GPU quota on a MIG card: HAMi checks the request's memory and cores against "
        "the quota but counts the profile's once placed (more: 19,968 MiB for a 15,000 MiB ask), "
        "which can put the namespace over its limit; hami-py checks what it will count, the "
        "profile. (Quotas are not part of this model; tests/unit/engine/test_mig.py covers it.)"
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
    mode: str = "hami-core"
    profiles: tuple[hmig.Profile, ...] = ()


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
    vgpu_mode: str | None = None  # nvidia.com/vgpu-mode; None when the pod does not set it


# (uuid, MiB, cores, MIG instance or None) per card, per container (init first, GPU-less
# containers empty).
Entry = tuple[str, int, int, hmig.Instance | None]
Devices = tuple[tuple[Entry, ...], ...]
# One entry of hami.io/vgpu-mig-allocations: (gpuUUID, profile, start, size).
Allocation = tuple[str, str, int, int]


@dataclass
class Usage:
    card: Card
    used: int = 0
    usedmem: int = 0
    usedcores: int = 0
    score: float = 0.0
    mig: list[hmig.Instance] = field(default_factory=list)  # MigAllocationsInUse
    health: bool = True  # cleared by getNodesUsage when the card's MIG bookkeeping is off

    def copy(self) -> "Usage":
        return replace(self, mig=list(self.mig))


@dataclass
class Cluster:
    nodes: dict[str, list[Card]]
    # name -> node, devices, n_init, the pod's hami.io/vgpu-mig-allocations
    pods: dict[str, tuple[str, Devices, int, tuple[Allocation, ...]]] = field(default_factory=dict)


def encode_mig_allocations(devices: Devices) -> tuple[Allocation, ...]:
    """EncodeMigAllocations: one entry per device that carries a profile and placement."""
    return tuple(
        (uuid, inst[0], inst[1], inst[2])
        for ctr in devices
        for uuid, _, _, inst in ctr
        if inst is not None
    )


def _collapsed(devices: Devices, n_init: int) -> dict[str, tuple[int, int, int]]:
    """CollapseInitContainerUsage: per card (slots, MiB, cores)."""
    init_mem: dict[str, int] = {}
    init_cores: dict[str, int] = {}
    for ctr in devices[:n_init]:
        for uuid, mem, cores, _ in ctr:
            init_mem[uuid] = max(init_mem.get(uuid, 0), mem)
            init_cores[uuid] = max(init_cores.get(uuid, 0), cores)
    slots: dict[str, int] = {}
    mem_sum: dict[str, int] = {}
    core_sum: dict[str, int] = {}
    for ctr in devices[n_init:]:
        for uuid, mem, cores, _ in ctr:
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
    """getNodesUsage: every node from zero, then every cached pod added onto its node's cards,
    its MIG allocations onto the cards they name, with HAMi's distrust of cards where they do
    not add up."""
    view = {name: [Usage(c) for c in cards] for name, cards in cluster.nodes.items()}
    for node, devices, n_init, allocations in cluster.pods.values():
        cards = view.get(node, [])
        by_gpu: dict[str, list[hmig.Instance]] = {}
        for gpu, profile, start, size in allocations:
            by_gpu.setdefault(gpu, []).append((profile, start, size))
        for uuid, (slots, mem, cores) in sorted(_collapsed(devices, n_init).items()):
            for u in cards:
                if u.card.uuid != uuid:
                    continue
                u.used += slots
                u.usedmem += mem
                u.usedcores += cores
                if by_gpu.get(uuid):
                    if u.card.mode == "hami-core":
                        u.health = False
                        continue
                    u.mig.append(by_gpu[uuid].pop(0))
                    continue
                if u.card.mode == "mig":
                    u.health = False
        for gpu, left in by_gpu.items():
            if not left:
                continue
            found = [u for u in cards if u.card.uuid == gpu]
            for u in found[:1]:
                if u.card.mode != "mig":
                    u.health = False
                else:
                    u.mig.extend(left)
            if not found:
                for u in cards:
                    if u.card.mode == "mig":
                        u.health = False
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


# hami-py's side of the MIG differences, as the model follows it (DELIBERATE_DIFFERENCES).
MIG_WHOLE_CARD = True  # "mig-whole-card"
MIG_CORES = True  # "mig-cores"
MIG_REASON_COUNTS = True  # "mig-reason-counts"


def share_base(c: Card) -> int:
    """The memory a percentage is taken of ("mig-whole-card")."""
    if MIG_WHOLE_CARD and c.mode == "mig" and c.profiles:
        return max(p.memory for p in c.profiles)
    return c.devmem


def fit(cards: Sequence[Usage], ask: Ask, pod: Pod) -> list[tuple[Usage, int]] | str:
    """NvidiaGPUDevices.Fit over the sorted list, from the tail: (card, MiB asked) per pick, a
    MIG card visited again after each pick (`i++`), or the reason."""
    nums, prev_numa = ask.nums, -1
    taken: list[tuple[Usage, int]] = []
    reasons: dict[str, int] = {}
    mutex = "mutex" in [t.strip() for t in pod.gpu_policy.split(",")]
    cores = min(ask.cores, 100)

    def count(picks: Sequence[tuple[Usage, int]]) -> int:
        return len({id(u) for u, _ in picks}) if MIG_REASON_COUNTS else len(picks)

    def no(reason: str, u: Usage) -> None:
        if MIG_REASON_COUNTS and any(t is u for t, _ in taken):
            return  # the card gave this container something: counted under that
        reasons[reason] = reasons.get(reason, 0) + 1

    i = len(cards) - 1
    while i >= 0:
        u = cards[i]
        c = u.card
        i -= 1
        if not (c.health and u.health):
            no("CardNotHealth", u)
            continue
        if pod.vgpu_mode is not None and c.mode not in pod.vgpu_mode:
            no("CardTypeMismatch", u)
            continue
        if pod.numa_bind and prev_numa != c.numa:
            if nums != ask.nums:
                reasons["NumaNotFit"] = reasons.get("NumaNotFit", 0) + count(taken)
            nums, prev_numa, taken = ask.nums, c.numa, []
        if c.count <= u.used:
            no("CardTimeSlicingExhausted", u)
            continue
        if mutex and u.used > 0:
            no("ExclusiveDeviceAllocateConflict", u)
            continue
        pct_mem = share_base(c) * ask.pct // 100 if ask.pct != PCT_UNSET else 0
        mem = ask.mem if ask.mem > 0 else pct_mem
        if c.devmem - u.usedmem < mem:
            no("CardInsufficientMemory", u)
            continue
        if c.devcore - u.usedcores < cores:
            no("CardInsufficientCore", u)
            continue
        if c.devcore == 100 and cores == 100 and u.used > 0:
            no("ExclusiveDeviceAllocateConflict", u)
            continue
        if c.devcore != 0 and u.usedcores == c.devcore and cores == 0:
            no("CardComputeUnitsExhausted", u)
            continue
        if c.mode == "mig":
            earlier = [(m, cores) for t, m in taken if t is u]
            if not hmig.custom_filter_rule(c.profiles, u.mig, earlier, mem, cores, MIG_CORES):
                no("CardMigTopologyInfeasible", u)
                continue
        taken.append((u, mem))
        nums -= 1
        if nums == 0:
            return taken
        if c.mode == "mig":
            i += 1
    if taken:
        reasons["AllocatedCardsInsufficientRequest"] = count(taken)
    return _gen_reason(reasons, len(cards))


def is_mig_request(cards: Sequence[Usage], pod: Pod) -> bool:
    """isMIGRequest."""
    if pod.vgpu_mode is not None and "mig" not in pod.vgpu_mode:
        return False
    return any(u.card.mode == "mig" for u in cards)


def fit_in_devices(cards: list[Usage], ask: Ask, pod: Pod) -> Devices | str:
    """fitInDevices for one container: score, sort the shared list in place, Fit, add usage."""
    for u in cards:
        u.score = compute_score(u, pod.weights)
    # Nodes here never carry more than 12 cards ("more-than-12-cards").
    insertion_sort(cards, less(pod.gpu_policy, pod.numa_bind))
    if ask.nums > len(cards) and not is_mig_request(cards, pod):
        return "NodeInsufficientDevice"
    got = fit(cards, ask, pod)
    if isinstance(got, str):
        return got
    out: list[Entry] = []
    for u, mem in got:
        cores = min(ask.cores, 100)
        instance: hmig.Instance | None = None
        if u.card.mode == "mig":
            profile, (start, size) = hmig.add_resource_usage(
                u.card.profiles, u.mig, mem, cores, MIG_CORES
            )
            mem, cores, instance = profile.memory, profile.core, (profile.name, start, size)
        u.used += 1
        u.usedmem += mem
        u.usedcores += cores
        out.append((u.card.uuid, mem, cores, instance))
    return (tuple(out),)


def score_node(cards: list[Usage], pod: Pod) -> tuple[Devices, float] | str:
    """scoreNode: init containers each on a copy, app containers on one shared copy."""
    out: list[tuple[Entry, ...]] = []
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
