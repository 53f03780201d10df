"""Decision comparison: hami-py's filter against a reference model of HAMi v2.10's placement.

Generated clusters (several nodes, cards of different sizes, NUMA nodes, an unhealthy card
now and then) take generated pods (one to three containers, init and GPU-less ones, every
policy and chain, numa-bind, scoring weights) and deletes. After every step both must choose
the same node and the same cards with the same MiB and cores, or both refuse with the same
reason per node. The second property does the same with cards in dynamic MIG mode beside
hami-core ones: generated profile sets and placements (real A100 and H100 geometries and
made-up ones), `nvidia.com/vgpu-mode`, and pods HAMi would distrust a card for (one holding a
MIG card without a MIG allocation, one whose allocation names a card the node lacks); there
the same profile and placement are expected too. What differs on purpose is listed once, in
tests.reference.hami_v210.DELIBERATE_DIFFERENCES, and the model follows hami-py there.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from hami.cache.store import ClusterCache
from hami.engine import nvidianames as names
from hami.engine.codec import encode_node_devices
from hami.engine.migalloc import MigAllocation, decode_allocations, encode_allocations
from hami.engine.model import ContainerDevice, DeviceInfo, MigInstance, MigPlacement
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.service.annotations import allocation_annotations
from hami.service.placement import Placement
from tests.builders import FAMILIES
from tests.reference import hami_v210 as hami
from tests.reference import hami_v210_mig as hami_mig
from tests.reference import hami_v210_register as hami_register
from tests.reference.geometries import (
    A100_40GB,
    A100_40GB_MEMORY,
    A100_EXAMPLE,
    H100_80GB,
    H100_80GB_MEMORY,
    engine_profiles,
)

POLICIES = (
    "spread",
    "binpack",
    "mutex",
    "numa",
    "binpack,numa",
    "spread,numa",
    "numa,binpack",
    "mutex,binpack",
    "mutex,spread",
)
WEIGHTS = ((1, 1, 1), (0, 1, 0), (2, 0, 1), (1, 0, 0))


@st.composite
def nodes(draw: st.DrawFn) -> dict[str, list[hami.Card]]:
    out = {}
    for n in range(draw(st.integers(1, 3))):
        cards = []
        for i in range(draw(st.integers(1, 5))):
            cards.append(
                hami.Card(
                    uuid=f"GPU-{n}-{i}",
                    index=i,
                    count=draw(st.sampled_from((10, 10, 10, 4, 2, 1))),
                    devmem=draw(st.sampled_from((15360, 15360, 40960))),
                    numa=draw(st.sampled_from((0, 0, 1))),
                    health=draw(st.sampled_from((True, True, True, True, False))),
                )
            )
        out[f"node-{n}"] = cards
    return out


# A few shapes, so that cards often carry equal usage and tie: the cases where the order of
# equal cards decides.
ASK = st.sampled_from(
    (
        None,
        hami.Ask(1, 1000),
        hami.Ask(1, 1000),
        hami.Ask(1, 1000, cores=30),
        hami.Ask(2, 1000),
        hami.Ask(1, 4000),
        hami.Ask(1, 12000),
        hami.Ask(1, pct=50),
        hami.Ask(1, pct=25, cores=100),
        hami.Ask(1),
        hami.Ask(2, cores=100),
    )
)


def pods(
    ask: st.SearchStrategy[hami.Ask | None], modes: tuple[str | None, ...] = (None,)
) -> st.SearchStrategy[hami.Pod]:
    return st.builds(
        hami.Pod,
        init=st.lists(ask, max_size=1).map(tuple),
        app=st.lists(ask, min_size=1, max_size=3).map(tuple),
        gpu_policy=st.sampled_from(POLICIES),
        node_policy=st.sampled_from(("binpack", "spread")),
        weights=st.sampled_from(WEIGHTS),
        numa_bind=st.sampled_from((False, False, False, True)),
        vgpu_mode=st.sampled_from(modes),
    )


POD = pods(ASK)

STEPS = st.lists(st.one_of(POD, POD, st.integers(0, 20)), min_size=1, max_size=12)


def resolved(ask: hami.Ask | None) -> hami.Ask | None:
    """HAMi's GenerateResourceRequests default: neither MiB nor percentage means 100 %."""
    if ask is None or ask.mem or ask.pct != hami.PCT_UNSET:
        return ask
    return hami.Ask(ask.nums, 0, 100, ask.cores)


def node_object(name: str, cards: list[hami.Card]) -> dict[str, Any]:
    devices = tuple(
        DeviceInfo(
            c.uuid,
            c.index,
            c.count,
            c.devmem,
            c.devcore,
            "NVIDIA A100-SXM4-40GB" if c.mode == "mig" else "NVIDIA-Tesla T4",
            c.numa,
            mode=c.mode,
            health=c.health,
            mig_profiles=engine_profiles(c.profiles),
        )
        for c in cards
    )
    return {
        "metadata": {
            "name": name,
            "annotations": {"hami.io/node-nvidia-register": encode_node_devices(devices)},
        },
        "status": {"allocatable": {"nvidia.com/gpu": str(10 * len(cards))}},
    }


def container(name: str, ask: hami.Ask | None) -> dict[str, Any]:
    if ask is None:
        return {"name": name}
    limits: dict[str, Any] = {"nvidia.com/gpu": ask.nums}
    if ask.mem:
        limits["nvidia.com/gpumem"] = ask.mem
    if ask.pct != hami.PCT_UNSET:
        limits["nvidia.com/gpumem-percentage"] = ask.pct
    if ask.cores:
        limits["nvidia.com/gpucores"] = ask.cores
    return {"name": name, "resources": {"limits": limits}}


def pod_object(name: str, pod: hami.Pod) -> dict[str, Any]:
    slot, core, memory = pod.weights
    annotations = {
        "hami.io/gpu-scheduler-policy": pod.gpu_policy,
        "hami.io/node-scheduler-policy": pod.node_policy,
        "hami.io/device-scoring-weights": f"slot={slot},core={core},memory={memory}",
        "nvidia.com/numa-bind": str(pod.numa_bind).lower(),
    }
    if pod.vgpu_mode is not None:
        annotations["nvidia.com/vgpu-mode"] = pod.vgpu_mode
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": name, "annotations": annotations},
        "spec": {
            "initContainers": [container(f"i{k}", a) for k, a in enumerate(pod.init)],
            "containers": [container(f"c{k}", a) for k, a in enumerate(pod.app)],
        },
    }


T4 = [hami.Card(f"GPU-0-{i}", i, 10, 15360) for i in range(4)]


def ours_devices(devices: hami.Devices) -> tuple[tuple[ContainerDevice, ...], ...]:
    def instance(i: hami_mig.Instance | None) -> MigInstance | None:
        return None if i is None else MigInstance(i[0], MigPlacement(i[1], i[2]))

    return tuple(
        tuple(ContainerDevice(u, mem, cores, mig=instance(i)) for u, mem, cores, i in c)
        for c in devices
    )


def as_model(devices: tuple[tuple[ContainerDevice, ...], ...]) -> hami.Devices:
    def instance(d: ContainerDevice) -> hami_mig.Instance | None:
        m = d.mig
        return None if m is None else (m.profile, m.placement.start, m.placement.size)

    return tuple(tuple((d.uuid, d.usedmem, d.usedcores, instance(d)) for d in c) for c in devices)


@dataclass(frozen=True)
class Foreign:
    """A running pod on the `node`-th node's `card`-th card that HAMi would distrust a card
    for: `kind` "bare" holds it without a MIG allocation, "stray" carries one naming a card
    the node does not have, "on-core" one naming the card itself."""

    node: int
    card: int
    kind: str


def run_steps(cluster: dict[str, list[hami.Card]], steps: list[Any]) -> None:
    ours = ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    ours.replace_nodes([node_object(n, cards) for n, cards in cluster.items()])
    model = hami.Cluster(cluster)
    placed: dict[str, dict[str, Any]] = {}
    candidates = [*cluster, "no-such-node"]
    for number, step in enumerate(steps):
        name = f"pod-{number}"
        if isinstance(step, int):  # delete the step-th pod still placed, if any
            if placed:
                gone = sorted(placed)[step % len(placed)]
                ours.delete_pod(placed.pop(gone))
                del model.pods[gone]
            continue
        if isinstance(step, Foreign):
            placed[name] = foreign(ours, model, name, step)
            continue
        pod = hami.Pod(
            tuple(resolved(a) for a in step.init),
            tuple(resolved(a) for a in step.app),
            step.gpu_policy,
            step.node_policy,
            step.weights,
            step.numa_bind,
            step.vgpu_mode,
        )
        obj = pod_object(name, step)
        outcome = Placement(ours, Defaults(), ResourceDefaults()).filter(obj, candidates)
        if not any((*pod.init, *pod.app)):
            assert outcome.gpu is False
            continue
        want = hami.filter_pod(model, pod, candidates)
        decision = outcome.decision
        assert decision is not None, outcome
        got = None if decision.devices is None else as_model(decision.devices)
        assert (decision.node, got) == (want.node, want.devices), (name, pod)
        if want.node is None:
            assert dict(decision.failed) == dict(want.failed), (name, pod)
            continue
        assert want.devices is not None and decision.devices is not None
        # /bind's re-check on the cache filter left (its reservation counted) accepts it.
        assert ours.overcommitted(want.node, decision.devices) == [], (name, pod)
        written = allocation_annotations(want.node, decision.devices, 0, families=FAMILIES)
        allocations = hami.encode_mig_allocations(want.devices)
        assert [
            (a.gpu, a.instance.profile, a.instance.placement.start, a.instance.placement.size)
            for a in decode_allocations(written.get(names.MIG_ALLOCATIONS, ""))
        ] == list(allocations)
        obj["metadata"]["annotations"].update(written)
        obj["spec"]["nodeName"] = want.node
        ours.upsert_pod(obj)
        placed[name] = obj
        model.pods[name] = (want.node, want.devices, len(pod.init), allocations)


def foreign(ours: ClusterCache, model: hami.Cluster, name: str, step: Foreign) -> dict[str, Any]:
    node = sorted(model.nodes)[step.node % len(model.nodes)]
    cards = model.nodes[node]
    card = cards[step.card % len(cards)]
    devices: hami.Devices = (((card.uuid, 1000, 0, None),),)
    gpu = {"bare": "", "stray": "GPU-not-on-this-node", "on-core": card.uuid}[step.kind]
    allocations = ((gpu, "1g.5gb", 0, 1),) if gpu else ()
    obj = pod_object(name, hami.Pod((), (hami.Ask(1, 1000),)))
    annotations = allocation_annotations(node, ours_devices(devices), 0, families=FAMILIES)
    if allocations:
        entry = MigInstance("1g.5gb", MigPlacement(0, 1))
        annotations[names.MIG_ALLOCATIONS] = encode_allocations((MigAllocation(0, 0, gpu, entry),))
    obj["metadata"]["annotations"].update(annotations)
    obj["spec"]["nodeName"] = node
    ours.upsert_pod(obj)
    model.pods[name] = (node, devices, 0, allocations)
    return obj


@settings(max_examples=300, deadline=None)
@given(cluster=nodes(), steps=STEPS)
# The side-by-side case: spread puts three 1000 MiB tenants on cards 3, 2 and 1; a
# two-container pod then goes twice to card 0, which ties with them after its first container.
@example(
    cluster={"node-0": T4},
    steps=[
        hami.Pod((), (hami.Ask(1, 1000),), "spread"),
        hami.Pod((), (hami.Ask(1, 1000),), "spread"),
        hami.Pod((), (hami.Ask(1, 1000),), "spread"),
        hami.Pod((), (hami.Ask(1, 1000), hami.Ask(1, 1000)), "spread"),
    ],
)
def test_same_decisions_as_hami(cluster: dict[str, list[hami.Card]], steps: list[Any]) -> None:
    run_steps(cluster, steps)


REAL = {A100_40GB_MEMORY: A100_40GB, H100_80GB_MEMORY: H100_80GB}


@st.composite
def made_up_profile(draw: st.DrawFn) -> hami_mig.Profile:
    g = draw(st.sampled_from((1, 2, 3, 4, 7)))
    size = draw(st.sampled_from((1, 2, 4, 8)))
    starts = draw(st.lists(st.integers(0, 8 - size), min_size=1, max_size=4, unique=True))
    # 90000 MiB: more than an H100 registers, as on an H200 whose profiles exceed it.
    memory = draw(st.sampled_from((4000, 4864, 9856, 15000, 19968, 40192, 90000)))
    placements = tuple((s, size) for s in starts)
    return hami_mig.Profile(
        f"{g}g.{memory // 1000}gb", memory, draw(st.integers(0, 100)), g, placements
    )


@st.composite
def mig_nodes(draw: st.DrawFn) -> dict[str, list[hami.Card]]:
    out = {}
    for n in range(draw(st.integers(1, 3))):
        cards = []
        for i in range(draw(st.integers(1, 3))):
            numa = draw(st.sampled_from((0, 0, 1)))
            health = draw(st.sampled_from((True, True, True, True, False)))
            if draw(st.sampled_from((True, True, False))):
                devmem = draw(st.sampled_from(sorted(REAL)))
                real = REAL[devmem]
                chosen = draw(st.lists(st.sampled_from(real), min_size=1, max_size=5, unique=True))
                profiles = tuple(p for p in real if p in chosen)  # the allowlist keeps NVML's order
                if draw(st.sampled_from((False, False, True))):
                    profiles = tuple(draw(st.lists(made_up_profile(), min_size=1, max_size=4)))
                count = draw(st.sampled_from((7, 7, 4, 2)))
                card = hami.Card(
                    f"GPU-{n}-{i}", i, count, devmem, 100, numa, health, "mig", profiles
                )
            else:
                count = draw(st.sampled_from((10, 4, 1)))
                card = hami.Card(f"GPU-{n}-{i}", i, count, 40960, 100, numa, health)
            cards.append(card)
        out[f"node-{n}"] = cards
    return out


MIG_ASK = st.sampled_from(
    (
        None,
        hami.Ask(1, 4000),
        hami.Ask(1, 4000),
        hami.Ask(1, 15000),
        hami.Ask(1, 9000, cores=20),
        hami.Ask(2, 4000),
        hami.Ask(3, 1000),
        hami.Ask(1, 30000),
        hami.Ask(1, pct=25),
        hami.Ask(1, cores=100),
        hami.Ask(1, 1000, cores=60),
    )
)

MIG_POD = pods(MIG_ASK, (None, None, None, "mig", "hami-core", "hami-core,mig", ""))
FOREIGN = st.builds(
    Foreign, st.integers(0, 2), st.integers(0, 2), st.sampled_from(("bare", "stray", "on-core"))
)
MIG_STEPS = st.lists(
    st.one_of(MIG_POD, MIG_POD, MIG_POD, st.integers(0, 20), FOREIGN), min_size=1, max_size=12
)


def a100(index: int, profiles: tuple[hami_mig.Profile, ...] = A100_EXAMPLE) -> hami.Card:
    return hami.Card(f"GPU-0-{index}", index, 7, A100_40GB_MEMORY, mode="mig", profiles=profiles)


@settings(max_examples=300, deadline=None)
@given(cluster=mig_nodes(), steps=MIG_STEPS)
# The worked example: one A100-40GB offering 1g.5gb, 2g.10gb, 3g.20gb and 7g.40gb;
# 15000 MiB gets 3g.20gb on slices 4-7, 4000 MiB 1g.5gb on slice 3, and the next 15000 MiB
# fits nowhere (16,128 MiB are free, but no 3g.20gb or 7g.40gb placement is).
@example(
    cluster={"node-0": [a100(0)]},
    steps=[
        hami.Pod((), (hami.Ask(1, 15000),)),
        hami.Pod((), (hami.Ask(1, 4000),)),
        hami.Pod((), (hami.Ask(1, 15000),)),
    ],
)
# One container taking several instances of one card, then more than the card has.
@example(
    cluster={"node-0": [a100(0), a100(1)]},
    steps=[hami.Pod((), (hami.Ask(5, 4000),)), hami.Pod((), (hami.Ask(12, 4000),))],
)
# A card filled to the last slice: seven 1g.5gb count 105 % of the cores, yet both place all
# seven (and bind accepts each); an eighth goes to the second card.
@example(
    cluster={"node-0": [a100(0, A100_40GB), a100(1, A100_40GB)]},
    steps=[hami.Pod((), (hami.Ask(1, 4000),), "binpack")] * 8,
)
# 3g + 2g + 1g + 1g: 102 %.
@example(
    cluster={"node-0": [a100(0, A100_40GB)]},
    steps=[
        hami.Pod((), (hami.Ask(1, 15000),)),
        hami.Pod((), (hami.Ask(1, 9000),)),
        hami.Pod((), (hami.Ask(1, 4000),)),
        hami.Pod((), (hami.Ask(1, 4000),)),
    ],
)
def test_same_mig_decisions_as_hami(cluster: dict[str, list[hami.Card]], steps: list[Any]) -> None:
    run_steps(cluster, steps)


# What an older release, or nobody, left in hami.io/node-handshake; "fresh" and "old" are a
# Requesting_ stamp 10 s and 10 min before the pass.
HANDSHAKE = st.sampled_from(
    (
        "",
        "Deleted_2025-01-02 03:04:05",
        "Reported 2025-01-02 03:04:05 +0000 UTC",
        "fresh",
        "old",
        "Requesting",
        "Requesting_garbage",
    )
)
# Before a pass: a handshake someone else writes (None: nobody writes one), nvidia.com/gpu
# allocatable, seconds since the previous pass.
PASSES = st.lists(
    st.tuples(
        st.one_of(st.none(), HANDSHAKE), st.sampled_from((4, 4, 0)), st.sampled_from((15, 90))
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(start=st.one_of(st.none(), HANDSHAKE), passes=PASSES)
# The migrated node: HAMi v2.7 gave it up (Deleted_), the v2.10 device plugin writes no
# handshake; HAMi v2.10 rewrites it to Requesting_ and registers the node.
@example(start="Deleted_2025-01-02 03:04:05", passes=[(None, 4, 15), (None, 4, 90)])
def test_same_nodes_registered_as_hami(start: str | None, passes: list[Any]) -> None:
    now = datetime(2026, 12, 4, 12, 0, 0)
    handshake = start
    hami_nodes = hami_register.Registry()
    ours = ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    devices = (DeviceInfo("GPU-0", 0, 10, 15360, 100, "NVIDIA-Tesla T4"),)
    for written, allocatable, later in passes:
        now += timedelta(seconds=later)
        handshake = written if written is not None else handshake
        stamp = {"fresh": now - timedelta(seconds=10), "old": now - timedelta(minutes=10)}
        if handshake in stamp:
            handshake = "Requesting_" + stamp[handshake].strftime(hami_register.DATE_TIME)
        node = node_object("n", [])
        node["metadata"]["annotations"] = {
            "hami.io/node-nvidia-register": encode_node_devices(devices),
            **({"hami.io/node-handshake": handshake} if handshake is not None else {}),
        }
        node["status"]["allocatable"]["nvidia.com/gpu"] = str(allocatable)
        ours.upsert_node(node)
        before = handshake
        handshake = hami_nodes.register("n", handshake, allocatable, 1, now)
        assert ("n" in ours.view) == hami_nodes.registered("n", allocatable), (before, allocatable)
