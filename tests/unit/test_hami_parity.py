"""Decision comparison: hami-py's filter against a reference model of HAMi v2.10's placement.

Generated clusters (several nodes, cards of different sizes, NUMA nodes, an unhealthy card
now and then) take generated pods (one to three containers, init and GPU-less ones, every
policy and chain, numa-bind, scoring weights) and deletes. After every step both must choose
the same node and the same cards with the same MiB and cores, or both refuse with the same
reason per node. What differs on purpose is listed once, in
tests.reference.hami_v210.DELIBERATE_DIFFERENCES, and the model follows hami-py there.
"""

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from hami.cache.store import ClusterCache
from hami.engine.codec import encode_node_devices
from hami.engine.model import DeviceInfo
from hami.service.annotations import allocation_annotations
from hami.service.placement import Placement
from tests.reference import hami_v210 as hami

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

POD = st.builds(
    hami.Pod,
    init=st.lists(ASK, max_size=1).map(tuple),
    app=st.lists(ASK, min_size=1, max_size=3).map(tuple),
    gpu_policy=st.sampled_from(POLICIES),
    node_policy=st.sampled_from(("binpack", "spread")),
    weights=st.sampled_from(WEIGHTS),
    numa_bind=st.sampled_from((False, False, False, True)),
)

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
            "NVIDIA-Tesla T4",
            c.numa,
            health=c.health,
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
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": name, "annotations": annotations},
        "spec": {
            "initContainers": [container(f"i{k}", a) for k, a in enumerate(pod.init)],
            "containers": [container(f"c{k}", a) for k, a in enumerate(pod.app)],
        },
    }


T4 = [hami.Card(f"GPU-0-{i}", i, 10, 15360) for i in range(4)]


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
    ours = ClusterCache(clock=lambda: 0.0)
    ours.replace_nodes([node_object(n, cards) for n, cards in cluster.items()])
    model = hami.Cluster(cluster)
    placed: dict[str, dict[str, Any]] = {}
    candidates = [*cluster, "no-such-node"]
    for number, step in enumerate(steps):
        if isinstance(step, int):  # delete the step-th pod still placed, if any
            if placed:
                name = sorted(placed)[step % len(placed)]
                ours.delete_pod(placed.pop(name))
                del model.pods[name]
            continue
        pod = hami.Pod(
            tuple(resolved(a) for a in step.init),
            tuple(resolved(a) for a in step.app),
            step.gpu_policy,
            step.node_policy,
            step.weights,
            step.numa_bind,
        )
        name = f"pod-{number}"
        obj = pod_object(name, step)
        outcome = Placement(ours).filter(obj, candidates)
        if not any((*pod.init, *pod.app)):
            assert outcome.gpu is False
            continue
        want = hami.filter_pod(model, pod, candidates)
        decision = outcome.decision
        assert decision is not None, outcome
        got = (
            None
            if decision.devices is None
            else tuple(tuple((d.uuid, d.usedmem, d.usedcores) for d in c) for c in decision.devices)
        )
        assert (decision.node, got) == (want.node, want.devices), (name, pod)
        if want.node is None:
            assert dict(decision.failed) == dict(want.failed), (name, pod)
            continue
        assert want.devices is not None and decision.devices is not None
        obj["metadata"]["annotations"].update(
            allocation_annotations(want.node, decision.devices, 0)
        )
        obj["spec"]["nodeName"] = want.node
        ours.upsert_pod(obj)
        placed[name] = obj
        model.pods[name] = (want.node, want.devices, len(pod.init))
