"""A bind for a pod of another device family, against the in-memory API server: the node's
lock (the one HAMi's plugins share), the family's allocation annotations in the Binding, and
HAMi's bind phase; no NVIDIA key."""

from datetime import UTC, datetime

from hami.cache.store import ClusterCache
from hami.engine import names, nvidianames
from hami.engine.families.hygon import HYGON
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.kube.events import EventRecorder
from hami.kube.leader import AlwaysLeader
from hami.service.binding import Binder
from hami.service.bindrules import Budget
from hami.service.nodelock.table import NodeLocks
from hami.service.nodelock.wire import decode_node_lock, lock_keys
from hami.service.placement import Placement
from tests.builders import FAMILIES, family_node, family_pod, sample_card
from tests.fakes.kubeapi import FakeKube

NOW = datetime(2026, 8, 21, 10, 0, 0, tzinfo=UTC)
WIRE = HYGON.wire


async def test_a_dcu_pod_is_filtered_and_bound_with_hygons_annotations() -> None:
    api = FakeKube()
    locks = NodeLocks(recheck=0.05, keys=lock_keys(FAMILIES))
    cache = ClusterCache(
        clock=lambda: 0.0, locks=locks, families=FAMILIES, resources=ResourceDefaults()
    )
    cache.upsert_node(
        api.add("nodes", family_node("n", HYGON, [sample_card(HYGON, i) for i in range(2)]))
    )
    pod = api.add("pods", family_pod("p", HYGON, mem=2000))
    cache.upsert_pod(pod)
    out = Placement(cache, Defaults(), ResourceDefaults()).filter(pod, ["n"])
    assert out.node_names == ["n"], out
    binder = Binder(
        api,
        cache,
        EventRecorder(api, rate=0),
        now=lambda: NOW,
        locks=locks,
        leadership=AlwaysLeader(),
        budget=Budget(total=3.0, verify=0.2, binding=0.2, write=0.2),
    )
    await binder.bind("ns", "p", "uid-p", "n")
    bound = api.get("pods", "p", "ns")
    assert bound is not None and bound["spec"]["nodeName"] == "n"
    annotations = bound["metadata"]["annotations"]
    assert annotations[WIRE.to_allocate_annotation] == "DCU-1,DCU,2000,100:;"
    assert annotations[WIRE.allocated_annotation] == "DCU-1,DCU,2000,100:;"
    assert annotations[names.ASSIGNED_NODE] == "n"
    assert annotations[names.BIND_PHASE] == names.PHASE_ALLOCATING
    assert nvidianames.DEVICES_ALLOCATED not in annotations
    # The node lock HAMi's Hygon plugin reads (hami.io/mutex.lock) names the pod.
    node = api.get("nodes", "n")
    assert node is not None
    lock = node["metadata"]["annotations"].get(WIRE.lock_name)
    assert lock is not None and decode_node_lock(lock)[1:] == ("ns", "p")
