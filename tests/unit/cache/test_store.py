"""The cluster cache: incremental usage, reservations, relists, restarts."""

from typing import Any

import pytest

from hami.cache.store import ClusterCache
from hami.engine.model import (
    ContainerDevice,
    ContainerRequest,
    PodDevices,
    PodRequest,
    Usage,
)
from hami.engine.policy import pod_options
from hami.engine.requests import ResourceDefaults
from hami.engine.summarycheck import summary_check
from hami.engine.usage import pod_usage
from hami.service.annotations import allocation_annotations
from hami.service.nodelock.table import NodeLocks
from hami.service.nodelock.wire import lock_keys
from tests.builders import FAMILIES, allocated_pod, pending_pod, registered_node, t4s
from tests.fakes.clock import Clock
from tests.unit.cache.cards import usage


def test_usage_follows_pod_events() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])
    cache.upsert_pod(allocated_pod("a"))
    cache.upsert_pod(allocated_pod("b", mem=2000))
    assert usage(cache, "GPU-0") == Usage(2, 3000, 0)
    cache.upsert_pod(allocated_pod("a", phase="Succeeded"))
    assert usage(cache, "GPU-0") == Usage(1, 2000, 0)
    cache.delete_pod(allocated_pod("b"))
    assert usage(cache, "GPU-0") == Usage()


def test_terminating_pods_keep_their_share_until_deleted() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])
    p = allocated_pod("a")
    p["metadata"]["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    cache.upsert_pod(p)
    assert usage(cache, "GPU-0") == Usage(1, 1000, 0)


def test_a_restart_rebuilds_the_same_usage_from_a_list_in_any_order() -> None:
    pods = [
        allocated_pod("a"),
        allocated_pod("b", "GPU-1"),
        allocated_pod("c", mem=3000),
        allocated_pod("d", phase="Failed"),
    ]
    first = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    first.replace_nodes([registered_node("n", t4s(2))])
    for p in pods:
        first.upsert_pod(p)
    second = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    second.replace_pods(list(reversed(pods)))  # pods may arrive before their node
    second.replace_nodes([registered_node("n", t4s(2))])
    assert first.view == second.view


def test_relist_drops_pods_deleted_while_disconnected() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])
    cache.replace_pods([allocated_pod("a"), allocated_pod("b")])
    cache.replace_pods([allocated_pod("b")])
    assert usage(cache, "GPU-0") == Usage(1, 1000, 0)


def test_reservation_counts_until_the_watch_confirms_it_and_is_never_double_counted() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])
    devices = ((ContainerDevice("GPU-1", 500, 0),),)
    cache.reserve("a", "ns", "a", "n", devices, 0)
    assert usage(cache, "GPU-1") == Usage(1, 500, 0)
    # Events of the pod before bind wrote its annotations keep the reservation.
    cache.upsert_pod({"metadata": {"uid": "a"}, "spec": {}, "status": {"phase": "Pending"}})
    assert usage(cache, "GPU-1") == Usage(1, 500, 0)
    cache.upsert_pod(allocated_pod("a", "GPU-1", 500))
    assert cache.reservation("a") is None
    assert usage(cache, "GPU-1") == Usage(1, 500, 0)


def test_reservations_expire_without_a_bind() -> None:
    clock = Clock()
    cache = ClusterCache(clock, reservation_ttl=30, families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])
    cache.upsert_pod(pending_pod("a"))
    cache.reserve("a", "ns", "a", "n", ((ContainerDevice("GPU-0", 500, 0),),), 0)
    clock.now = 29
    assert cache.expire() == []
    clock.now = 30
    assert [r.uid for r in cache.expire()] == ["a"]
    assert usage(cache, "GPU-0") == Usage()


def test_refilter_releases_what_an_unbound_pod_held() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])
    cache.upsert_pod(
        allocated_pod("a", node=None)
    )  # annotated by a bind that never posted the Binding
    cache.upsert_pod(allocated_pod("b"))
    cache.release_unbound("a")
    cache.release_unbound("b")  # bound pods keep their share
    assert usage(cache, "GPU-0") == Usage(1, 1000, 0)


def test_unregistered_nodes_are_explained() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes(
        [registered_node("n", t4s(2), allocatable="0"), {"metadata": {"name": "cpu-only"}}]
    )
    assert cache.view == {}
    assert "allocatable nvidia.com/gpu is 0" in cache.unregistered["n"]
    assert "hami.io/node-nvidia-register" in cache.unregistered["cpu-only"]
    cache.upsert_node(registered_node("n", t4s(2)))
    assert "n" in cache.view and "n" not in cache.unregistered


def test_cordon_annotation_reaches_the_engine() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2), **{"hami.io/device-cordon": "GPU-1, GPU-9"})])
    assert cache.view["n"].cordoned == frozenset({"GPU-1", "GPU-9"})


def test_init_containers_collapse_and_shrink_once_finished() -> None:
    devices = (
        (ContainerDevice("G", 8000, 50),),
        (ContainerDevice("G", 3000, 10),),
        (ContainerDevice("G", 3000, 10),),
    )
    assert pod_usage(devices, 1) == {"G": Usage(2, 8000, 50)}
    assert pod_usage(devices, 1, init_done=True) == {"G": Usage(2, 6000, 20)}
    only_init = ((ContainerDevice("G", 8000, 0),), ())
    assert pod_usage(only_init, 1) == {"G": Usage(1, 8000, 0)}
    assert pod_usage(only_init, 1, init_done=True) == {}


def test_a_reservation_for_a_pod_the_watch_never_showed_expires_soon() -> None:
    """An unauthenticated /filter of a made-up pod must not fence a card off for the full TTL."""
    clock = Clock()
    cache = ClusterCache(
        clock,
        reservation_ttl=120,
        unknown_pod_ttl=5,
        families=FAMILIES,
        resources=ResourceDefaults(),
    )
    cache.replace_nodes([registered_node("n", t4s(2))])
    cache.reserve("ghost", "ns", "ghost", "n", ((ContainerDevice("GPU-0", 500, 0),),), 0)
    cache.reserve("late", "ns", "late", "n", ((ContainerDevice("GPU-1", 500, 0),),), 0)
    clock.now = 1
    cache.upsert_pod(pending_pod("late"))  # the watch catches up: the full TTL from now
    clock.now = 5
    assert [r.uid for r in cache.expire()] == ["ghost"]
    assert usage(cache, "GPU-0") == Usage()
    clock.now = 120
    assert cache.expire() == []
    clock.now = 121
    assert [r.uid for r in cache.expire()] == ["late"]


def forged(uid: str, annotation: str, **spec: Any) -> dict[str, Any]:
    p = allocated_pod(uid)
    p["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = annotation
    p["spec"].update(spec)
    return p


BUSYBOX = {"containers": [{"name": "c"}]}
ONE_GPU_1000 = {
    "containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}}
    ]
}


def test_allocations_that_do_not_add_up_are_reported_and_not_counted_as_written() -> None:
    told: list[tuple[str, str, str]] = []
    cache = ClusterCache(
        Clock(),
        on_distrust=lambda ns, name, why: told.append((ns, name, why)),
        families=FAMILIES,
        resources=ResourceDefaults(),
    )
    cache.replace_nodes([registered_node("n", t4s(2))])
    four = "".join(f"GPU-{i % 2},NVIDIA,15360,100:" for i in range(4)) + ";"
    # A pod that asks for no GPU yet claims cards: not counted at all.
    cache.upsert_pod(forged("busybox", four, **BUSYBOX))
    assert usage(cache, "GPU-0") == Usage() and usage(cache, "GPU-1") == Usage()
    # Bound to another node than the allocation names: nothing on the node it names.
    cache.upsert_pod(forged("elsewhere", "GPU-0,NVIDIA,1000,0:;", nodeName="other"))
    assert usage(cache, "GPU-0") == Usage() and usage(cache, "GPU-1") == Usage()
    # Shrunk below its own request (1000 MiB): counted as requested.
    cache.upsert_pod(forged("shrunk", "GPU-0,NVIDIA,1,0:;"))
    assert usage(cache, "GPU-0") == Usage(1, 1000, 0)
    # More cards than the container asks for: bound here, so the kubelet gave it its one card,
    # counted whole on the card least used.
    cache.upsert_pod(forged("greedy", "GPU-0,NVIDIA,100,0:GPU-1,NVIDIA,100,0:;", **ONE_GPU_1000))
    assert usage(cache, "GPU-1") == Usage(1, 15360, 100)
    assert [c.name for c in cache.outside("n")] == ["greedy"]
    assert [(name, why.split(":")[0]) for _, name, why in told] == [
        ("busybox", "it lists more containers with cards than ask for a GPU"),
        ("elsewhere", "allocated on node n but the pod runs on other"),
        ("shrunk", "entry 0 on GPU-0"),
        ("greedy", "entry 0 holds 2 cards but its container asks for 1"),
    ]
    # The same annotation seen again (a status update) is not reported again.
    cache.upsert_pod(forged("shrunk", "GPU-0,NVIDIA,1,0:;"))
    assert len(told) == 4


def test_a_percentage_request_is_held_to_the_card_it_names() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])
    half = {
        "containers": [
            {
                "name": "c",
                "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 50}},
            }
        ]
    }
    cache.upsert_pod(forged("half", "GPU-1,NVIDIA,10,0:;", **half))
    assert usage(cache, "GPU-1") == Usage(1, 7680, 0)


def test_every_state_is_summed_up_as_its_usage_stands() -> None:
    """Decisions turn full nodes down from the summary alone, so it follows every event."""
    check = summary_check(PodRequest(app=(ContainerRequest(1, 15000),)), pod_options({}))
    assert check is not None

    def reason() -> str | None:
        return check.check(cache.view["n"], [])

    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])
    assert reason() is None
    cache.upsert_pod(allocated_pod("a"))
    cache.reserve("b", "ns", "b", "n", ((ContainerDevice("GPU-1", 500, 0),),), 0)
    assert reason() == "2/2 CardInsufficientMemory"
    cache.forget("b")
    assert reason() is None
    cache.upsert_pod(allocated_pod("c", "GPU-1", 15000))
    cache.delete_pod(allocated_pod("a"))
    assert reason() is None
    cache.upsert_pod(allocated_pod("d", "GPU-0", 400))
    assert reason() == "2/2 CardInsufficientMemory"


def test_capacity_freed_is_announced_once_per_event_and_never_for_a_pod_taking_its_own() -> None:
    freed: list[str] = []
    clock = Clock()
    cache = ClusterCache(
        clock,
        reservation_ttl=10,
        on_release=freed.append,
        families=FAMILIES,
        resources=ResourceDefaults(),
    )
    cache.replace_nodes([registered_node("n", t4s(2))])
    assert freed == ["n"], "a node registering its cards"
    freed.clear()
    cache.upsert_pod(pending_pod("a"))
    cache.reserve("a", "ns", "a", "n", ((ContainerDevice("GPU-0", 1000, 0),),), 0)
    cache.upsert_pod(allocated_pod("a"))  # the bind's annotations replace the reservation
    cache.release_unbound("a")  # a bound pod filtered again keeps its share
    assert freed == []
    cache.upsert_pod(allocated_pod("a", phase="Succeeded"))
    assert freed == ["n"]
    cache.upsert_pod(pending_pod("b"))
    cache.reserve("b", "ns", "b", "n", ((ContainerDevice("GPU-0", 1000, 0),),), 0)
    cache.forget("b")  # a failed bind gives its cards back
    cache.reserve("c", "ns", "c", "n", ((ContainerDevice("GPU-0", 1000, 0),),), 0)
    clock.now = 100
    cache.expire()
    cache.upsert_pod(allocated_pod("d"))
    cache.delete_pod(allocated_pod("d"))
    assert freed == ["n", "n", "n", "n"]


def test_gfd_registered_nodes_are_placed_without_the_device_plugin_handshake() -> None:
    labels = {"nvidia.com/gpu.memory": "15360", "nvidia.com/gpu.count": "1"}
    gke = {
        "metadata": {"name": "g", "labels": labels},
        "status": {"allocatable": {"nvidia.com/gpu": "1"}},
    }
    off = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    off.replace_nodes([gke, registered_node("n", t4s(2))])
    assert "g" in off.unregistered and off.handshake("n")
    cache = ClusterCache(Clock(), gfd_split=3, families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([gke, registered_node("n", t4s(2))])
    assert [(c.info.id, c.info.count) for c in cache.view["g"].cards] == [("GFD-g-0", 3)]
    assert not cache.handshake("g") and cache.handshake("n")
    cache.upsert_node({**gke, "status": {"allocatable": {"nvidia.com/gpu": "0"}}})
    assert "g" not in cache.view and "allocatable nvidia.com/gpu is 0" in cache.unregistered["g"]


@pytest.mark.parametrize(
    ("limits", "no_gpu"),
    [
        ({"nvidia.com/gpu": 0, "nvidia.com/gpumem": 1000}, True),  # bound without an allocation
        ({"nvidia.com/gpu": "0", "nvidia.com/gpucores": 30}, True),
        ({"cpu": 1}, False),  # never sent to the extender: a caller that is not kube-scheduler
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}, False),  # needs its reservation
        ({"nvidia.com/gpu": 65}, False),  # over the cap: refused, never bound bare
    ],
)
def test_which_pods_bind_without_an_allocation(limits: dict[str, Any], no_gpu: bool) -> None:
    pod = {"spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}
    assert (
        ClusterCache(
            clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults()
        ).asks_for_no_gpu(pod)
        is no_gpu
    )
    claim = ((ContainerDevice("GPU-x", 1000, 0),),)
    forged = {
        **pod,
        "metadata": {"annotations": allocation_annotations("n", claim, 0, families=FAMILIES)},
    }
    assert not ClusterCache(
        clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults()
    ).asks_for_no_gpu(forged)


def test_an_allocation_hami_wrote_without_gpu_less_entries_counts_the_same() -> None:
    # A pod placed by HAMi v2.10 before the switch: a GPU-less init container, two app
    # containers on one card. HAMi leaves the init container's entry out; read by position
    # that would make the first app container an init one (one slot, 1000 MiB instead of 2).
    spec = {
        "initContainers": [{"name": "setup"}],
        "containers": [
            {"name": n, "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}}
            for n in ("a", "b")
        ],
    }
    hami_v210 = "GPU-0,NVIDIA,1000,0:;" * 2
    for written in (hami_v210, ";" + hami_v210):  # theirs, ours
        cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
        cache.replace_nodes([registered_node("n", t4s(2))])
        cache.upsert_pod(forged("p", written, **spec))
        assert usage(cache, "GPU-0") == Usage(2, 2000, 0), written


def test_overcommitted_names_only_the_asked_cards_over_their_capacity() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])
    cache.upsert_pod(allocated_pod("a", mem=15000))

    def on(*cards: str) -> PodDevices:
        return (tuple(ContainerDevice(c, 1000, 0) for c in cards),)

    assert cache.overcommitted("n", on("GPU-0", "GPU-1")) == []
    # A reservation made before an allocation arrived that shares its card (a previous leader's
    # bind landing after the hand-over): together they no longer fit.
    cache.reserve("late", "ns", "late", "n", on("GPU-0"), 0)
    assert cache.overcommitted("n", on("GPU-0")) == ["GPU-0 (16000 MiB counted of 15360)"]
    assert cache.overcommitted("n", on("GPU-1")) == []
    assert cache.overcommitted("no-such-node", on("GPU-0")) == []


def test_a_node_update_that_leaves_its_inventory_alone_changes_nothing() -> None:
    cache = ClusterCache(
        Clock(),
        locks=NodeLocks(keys=lock_keys(FAMILIES)),
        families=FAMILIES,
        resources=ResourceDefaults(),
    )
    cache.replace_nodes([registered_node("n", t4s(2))])
    before = cache.view["n"]
    cache.upsert_node(
        registered_node("n", t4s(2), **{"hami.io/mutex.lock": "2026-12-04T10:00:00Z,ns,p"})
    )
    assert cache.view["n"] is before, "a lock coming and going rebuilds nothing"
    cache.upsert_node(registered_node("n", t4s(2), allocatable="0"))
    assert "n" not in cache.view and "allocatable" in cache.unregistered["n"]
    cache.upsert_node(registered_node("n", t4s(2), allocatable="0"))
    assert "n" not in cache.view
    cache.upsert_node(registered_node("n", t4s(2)))
    assert cache.view["n"].cards == before.cards


def test_a_bind_of_the_reserved_cards_carries_the_count_over() -> None:
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n", t4s(2))])
    devices = ((ContainerDevice("GPU-0", 1000, 0),),)
    cache.reserve("a", "ns", "a", "n", devices, 0)
    reserved = cache.view["n"]
    cache.upsert_pod(allocated_pod("a"))
    assert cache.reservation("a") is None
    assert cache.view["n"] is reserved, "the allocation is what the reservation counted"
    assert usage(cache, "GPU-0") == Usage(1, 1000, 0)
    fresh = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    fresh.replace_nodes([registered_node("n", t4s(2))])
    fresh.upsert_pod(allocated_pod("a"))
    assert fresh.view == cache.view
