"""The cache counts what it bound, and every bound GPU pod, whatever is written later.

* A bound pod's allocation is fixed for its life: edits and removal are ignored, and said once.
* A bound pod without an allocation of ours (another scheduler, a named node, an allocation
  naming another node or a card the node does not have) is counted as the kubelet's whole
  cards, on the node's least used cards, whatever order the events came in.
* An unbound pod's allocation counts only while its node's lock names it.
"""

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.cache.store import ClusterCache
from hami.engine.model import ContainerDevice, DeviceInfo, Usage
from hami.engine.outside import kubelet_gpus
from hami.engine.requests import ResourceDefaults
from hami.service.annotations import allocation_annotations
from hami.service.nodelock.table import NodeLocks
from hami.service.nodelock.wire import encode_node_lock, lock_keys
from tests.builders import FAMILIES, registered_node, t4s

from .test_store import Clock

CARDS = t4s(4)
WHOLE = Usage(1, 15360, 100)


def node(name: str = "n", cards: tuple[DeviceInfo, ...] = CARDS, lock: str = "") -> Any:
    """A registered node; `lock`: the pod its node lock names."""
    annotations = {"hami.io/mutex.lock": encode_node_lock(_now(), "ns", lock)} if lock else {}
    return registered_node(name, cards, **annotations)


def gpu_pod(
    uid: str,
    card: str | None = "GPU-0",
    *,
    mem: int | None = 1000,
    gpus: int = 1,
    on: str | None = "n",
    written_node: str = "n",
    scheduler: str = "hami-scheduler",
) -> dict[str, Any]:
    """A GPU pod; `card` None: no allocation; `mem` None: whole cards; `on` None: unbound."""
    limits: dict[str, Any] = {"nvidia.com/gpu": gpus}
    if mem is not None:
        limits["nvidia.com/gpumem"] = mem
    meta: dict[str, Any] = {"uid": uid, "namespace": "ns", "name": uid}
    if card is not None:
        share = ContainerDevice(card, mem or 15360, 0 if mem else 100)
        meta["annotations"] = allocation_annotations(
            written_node, ((share,),), 0, families=FAMILIES
        )
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "c", "resources": {"limits": limits}}],
    }
    if on is not None:
        spec["nodeName"] = on
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running"}}


def edited(pod: dict[str, Any], annotations: dict[str, str | None]) -> dict[str, Any]:
    out = {**pod, "metadata": {**pod["metadata"]}}
    written = dict(out["metadata"].get("annotations") or {})
    for key, value in annotations.items():
        if value is None:
            written.pop(key, None)
        else:
            written[key] = value
    out["metadata"]["annotations"] = written
    return out


def cards(cache: ClusterCache, name: str = "n") -> dict[str, Usage]:
    return {c.info.id: c.usage for c in cache.view[name].cards}


class Told:
    def __init__(self) -> None:
        self.edits: list[tuple[str, str]] = []

    def __call__(self, namespace: str, name: str, uid: str, what: str) -> None:
        self.edits.append((name, what))


def whole_card_tenant(told: Told | None = None) -> tuple[ClusterCache, dict[str, Any]]:
    cache = ClusterCache(
        Clock(), on_edit_ignored=told, families=FAMILIES, resources=ResourceDefaults()
    )
    cache.replace_nodes([node()])
    tenant = gpu_pod("tenant", "GPU-0", mem=None)
    cache.upsert_pod(tenant)
    assert cards(cache)["GPU-0"] == WHOLE
    return cache, tenant


EDITS: dict[str, dict[str, str | None]] = {
    "removed": {"hami.io/vgpu-devices-allocated": None, "hami.io/vgpu-node": None},
    "another card of the node": {"hami.io/vgpu-devices-allocated": "GPU-1,NVIDIA,15360,100:;"},
    "a card the node does not have": {"hami.io/vgpu-devices-allocated": "GPU-9,NVIDIA,15360,100:;"},
    "another node": {"hami.io/vgpu-node": "elsewhere"},
    "a smaller share": {"hami.io/vgpu-devices-allocated": "GPU-0,NVIDIA,1,0:;"},
}


@pytest.mark.parametrize("edit", EDITS)
def test_a_bound_pods_allocation_is_fixed_and_every_edit_is_ignored_and_told_once(
    edit: str,
) -> None:
    told = Told()
    cache, tenant = whole_card_tenant(told)
    changed = edited(tenant, EDITS[edit])
    cache.upsert_pod(changed)
    cache.upsert_pod(changed)  # a status update of the edited pod: said once
    assert cards(cache) == {"GPU-0": WHOLE, "GPU-1": Usage(), "GPU-2": Usage(), "GPU-3": Usage()}
    assert cache.allocation("tenant") is not None and list(cache.outside("n")) == []
    ((name, what),) = told.edits
    assert name == "tenant"
    assert "keeps counting what it was bound with: GPU-0,NVIDIA,15360,100:; on node n" in what
    # Put back as it was, then edited again: said again.
    cache.upsert_pod(tenant)
    cache.upsert_pod(changed)
    assert len(told.edits) == 2
    cache.delete_pod(tenant)
    assert all(u == Usage() for u in cards(cache).values())


def test_what_the_device_plugin_and_the_kubelet_record_later_still_counts() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([node()])
    spec: dict[str, Any] = {
        "initContainers": [
            {
                "name": "warm",
                "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8000}},
            }
        ],
        "containers": [
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}}
        ],
        "nodeName": "n",
    }
    devices = ((ContainerDevice("GPU-0", 8000, 0),), (ContainerDevice("GPU-0", 1000, 0),))
    pod: dict[str, Any] = {
        "metadata": {"uid": "p", "namespace": "ns", "name": "p"},
        "spec": spec,
        "status": {"phase": "Running"},
    }
    pod["metadata"]["annotations"] = allocation_annotations("n", devices, 0, families=FAMILIES)
    cache.upsert_pod(pod)
    assert cards(cache)["GPU-0"] == Usage(1, 8000, 0)
    # The init container finished, and the device plugin consumed what it had to allocate.
    done = {
        **pod,
        "status": {
            "phase": "Running",
            "initContainerStatuses": [{"state": {"terminated": {"exitCode": 0}}}],
        },
    }
    done = edited(done, {"hami.io/vgpu-devices-to-allocate": ";;", "hami.io/bind-phase": "success"})
    cache.upsert_pod(done)
    assert cards(cache)["GPU-0"] == Usage(1, 1000, 0)
    # Even with its allocation removed afterwards, the finished init container stays finished.
    cache.upsert_pod(edited(done, {"hami.io/vgpu-devices-allocated": None}))
    assert cards(cache)["GPU-0"] == Usage(1, 1000, 0)


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        (gpu_pod("x", None, mem=None, scheduler="volcano"), "bound by volcano without an"),
        (gpu_pod("x", None, mem=None, scheduler=""), "bound by default-scheduler"),
        (gpu_pod("x", "GPU-9"), "which node n does not have"),
        (gpu_pod("x", "GPU-0", written_node="other"), "allocated on node other but"),
    ],
)
def test_a_bound_gpu_pod_without_an_allocation_of_ours_counts_as_whole_cards(
    pod: dict[str, Any], why: str
) -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([node()])
    cache.upsert_pod(gpu_pod("ours", "GPU-3"))  # the least used cards are taken first
    cache.upsert_pod(pod)
    assert cards(cache) == {
        "GPU-0": Usage(),
        "GPU-1": Usage(),
        "GPU-2": WHOLE,
        "GPU-3": Usage(1, 1000, 0),
    }
    (claim,) = cache.outside("n")
    assert (claim.name, claim.cards) == ("x", 1) and why in claim.why, claim.why
    assert cache.allocation("x") is None and cache.claim("x") == claim
    cache.delete_pod(pod)
    assert cards(cache)["GPU-2"] == Usage() and list(cache.outside()) == []


def test_whole_cards_fill_the_node_and_then_over_commit_it_as_it_is() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([node()])
    for i in range(3):
        cache.upsert_pod(gpu_pod(f"ours-{i}", f"GPU-{i}", mem=14000))
    cache.upsert_pod(gpu_pod("two", None, mem=None, gpus=2, scheduler="other"))
    # One free card, then the least used of the rest.
    assert cards(cache)["GPU-3"] == WHOLE
    assert cards(cache)["GPU-2"] == Usage(2, 14000 + 15360, 100)
    both = ((ContainerDevice("GPU-2", 0, 0), ContainerDevice("GPU-3", 0, 0)),)
    assert cache.overcommitted("n", both) == ["GPU-2 (29360 MiB counted of 15360)"]
    # More than the node has: at most every card once.
    cache.upsert_pod(gpu_pod("eight", None, mem=None, gpus=8, scheduler="other"))
    assert sum(u.used for u in cards(cache).values()) == 3 + 2 + 4


def test_an_unbound_allocation_counts_only_while_the_node_lock_names_the_pod() -> None:
    freed: list[str] = []
    cache = ClusterCache(
        Clock(),
        on_release=freed.append,
        locks=NodeLocks(keys=lock_keys(FAMILIES)),
        families=FAMILIES,
        resources=ResourceDefaults(),
    )
    cache.replace_nodes([node()])
    freed.clear()
    squat = gpu_pod("squat", "GPU-0", mem=None, gpus=1, on=None)
    cache.upsert_pod(squat)
    assert all(u == Usage() for u in cards(cache).values()), "no bind of anyone holds it"
    # A bind that writes the allocation before its Binding (HAMi, an older release) holds it.
    locked = node(lock="squat")
    cache.upsert_node(locked)
    assert cards(cache)["GPU-0"] == WHOLE and freed == []
    # Another pod's lock, or none: not held.
    cache.upsert_node(node(lock="other"))
    assert cards(cache)["GPU-0"] == Usage() and freed == ["n"]
    cache.upsert_node(locked)
    cache.upsert_pod(gpu_pod("squat", "GPU-0", mem=None))  # the Binding landed: fixed now
    cache.upsert_node(node())
    assert cards(cache)["GPU-0"] == WHOLE


def _now() -> Any:
    import datetime as dt

    return dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_cards_a_node_registers_later_decide_how_its_pods_count() -> None:
    """Pods may come before their node, and a node may lose a card: the count follows."""
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_pods([gpu_pod("a", "GPU-3", mem=None), gpu_pod("b", "GPU-9", mem=None)])
    cache.replace_nodes([node()])
    assert cards(cache) == {"GPU-0": Usage(), "GPU-1": Usage(), "GPU-2": WHOLE, "GPU-3": WHOLE}
    assert [c.name for c in cache.outside("n")] == ["b"]
    # GPU-3 is gone from the registration: the pod on it is counted as the kubelet's card.
    cache.upsert_node(node(cards=CARDS[:3]))
    assert sorted(c.name for c in cache.outside("n")) == ["a", "b"]
    assert sorted(u.used for u in cards(cache).values()) == [0, 1, 1]


def test_an_allocation_written_after_a_bare_bind_is_ignored() -> None:
    told = Told()
    cache = ClusterCache(
        Clock(), on_edit_ignored=told, families=FAMILIES, resources=ResourceDefaults()
    )
    cache.replace_nodes([node()])
    bare = gpu_pod("bare", None, mem=None, scheduler="other")
    cache.upsert_pod(bare)
    claimed = edited(
        bare, {"hami.io/vgpu-node": "n", "hami.io/vgpu-devices-allocated": "GPU-0,NVIDIA,1,0:;"}
    )
    cache.upsert_pod(claimed)
    assert [c.name for c in cache.outside("n")] == ["bare"]
    assert "written after the pod was bound without one" in told.edits[0][1]
    # A scheduler started after the edit believes it (the README says so), raised to the pod's
    # own request (the whole card's memory).
    fresh = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    fresh.replace_nodes([node()])
    fresh.replace_pods([claimed])
    assert cards(fresh)["GPU-0"].usedmem == 15360 and list(fresh.outside()) == []


def test_a_pod_whose_gpus_are_not_devices_of_the_kubelet_counts_nothing_outside() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([node()])
    cache.upsert_pod(gpu_pod("none", None, mem=1000, gpus=0, scheduler="other"))
    assert list(cache.outside()) == [] and all(u == Usage() for u in cards(cache).values())


@pytest.mark.parametrize(
    ("containers", "init", "expected"),
    [
        ([1], [], 1),
        ([1, 2], [], 3),
        ([1], [4], 4),  # an init container's devices are reused by the app
        ([1], [{"n": 1, "sidecar": True}], 2),  # a sidecar runs beside the app
        ([0], [{"n": 1, "sidecar": True}, 2], 3),
        (["2"], [], 2),
        ([], [], 0),
    ],
)
def test_kubelet_gpus_is_the_pods_effective_request(
    containers: list[Any], init: list[Any], expected: int
) -> None:
    def container(n: Any) -> dict[str, Any]:
        count = n["n"] if isinstance(n, dict) else n
        c: dict[str, Any] = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": count}}}
        if isinstance(n, dict) and n.get("sidecar"):
            c["restartPolicy"] = "Always"
        return c

    spec = {
        "containers": [container(n) for n in containers],
        "initContainers": [container(n) for n in init],
    }
    assert kubelet_gpus(spec) == expected


POD_SHAPES = st.lists(
    st.tuples(
        st.sampled_from(["GPU-0", "GPU-1", "GPU-2", "GPU-3", "GPU-9", None]),
        st.sampled_from([None, 1000, 8000]),
        st.integers(1, 2),
        st.booleans(),  # bound to its node
    ),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(POD_SHAPES, st.randoms(use_true_random=False))
def test_any_order_of_events_counts_the_same_as_a_fresh_list(
    shapes: list[tuple[str | None, int | None, int, bool]], rng: random.Random
) -> None:
    """What a restarted scheduler counts equals what the running one counts, outside pods and
    their whole cards included: their cards depend on the node's usage, not on event order."""
    pods = [
        gpu_pod(f"p{i}", card, mem=mem, gpus=n if card is None else 1, on="n" if bound else None)
        for i, (card, mem, n, bound) in enumerate(shapes)
    ]
    live = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    live.replace_nodes([node()])
    events = [*pods, *rng.sample(pods, k=len(pods) // 2)]
    rng.shuffle(events)
    for p in events:
        live.upsert_pod(p)
    gone = rng.sample(pods, k=len(pods) // 3)
    for p in gone:
        live.delete_pod(p)
    fresh = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    fresh.replace_pods([p for p in reversed(pods) if p not in gone])
    fresh.replace_nodes([node()])
    assert live.view == fresh.view
    assert sorted(c.name for c in live.outside()) == sorted(c.name for c in fresh.outside())
