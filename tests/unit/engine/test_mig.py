"""Dynamic MIG: registration, profile and placement choice, the annotation, usage from pods.

Values marked "HAMi:" are what HAMi v2.10's source gives for the same input; where hami-py
differs on purpose the test names the entry of DELIBERATE_DIFFERENCES.
"""

from typing import Any

import orjson
import pytest

from hami.engine import names, nvidianames
from hami.engine.codec import CodecError, decode_node_devices, decode_pod_devices
from hami.engine.decide import schedule
from hami.engine.inventory import with_instances
from hami.engine.mig import label
from hami.engine.migalloc import MigAllocation, decode_allocations, encode_allocations
from hami.engine.model import ContainerDevice, MigInstance, MigPlacement, Usage
from hami.engine.policy import pod_options
from hami.engine.preempt import Preemptor, Victim, victims_on
from hami.engine.requests import ResourceDefaults, pod_request
from hami.engine.state import build_node
from tests.builders import FAMILIES
from tests.reference.geometries import A100_40GB
from tests.unit.mig_cluster import GPU, Cluster, card, gpu, node, pod


def test_the_issues_worked_example_gets_hamis_profiles_placements_and_reason() -> None:
    c = Cluster()
    first, _ = c.place(pod("a", gpu(15000)))
    second, _ = c.place(pod("b", gpu(4000)))
    third, why = c.place(pod("c", gpu(15000)))
    assert first[nvidianames.DEVICES_ALLOCATED] == f"{GPU},NVIDIA,19968,43:;"
    assert first[nvidianames.MIG_ALLOCATIONS] == (
        f'[{{"containerIndex":0,"deviceIndex":0,"gpuUUID":"{GPU}","profile":"3g.20gb",'
        '"placement":{"start":4,"size":4}}]'
    )
    assert second[nvidianames.DEVICES_ALLOCATED] == f"{GPU},NVIDIA,4864,15:;"
    assert decode_allocations(second[nvidianames.MIG_ALLOCATIONS])[0].instance == MigInstance(
        "1g.5gb", MigPlacement(3, 1)
    )
    # 40,960 - 19,968 - 4,864 = 16,128 MiB are free, but no 3g.20gb or 7g.40gb placement is.
    assert (third, why) == ({}, "a100: 1/1 CardMigTopologyInfeasible")


def test_a_hami_core_card_gets_no_mig_annotation() -> None:
    c = Cluster(node("t4", card(mode="hami-core")))
    written, _ = c.place(pod("a", gpu(15000)))
    assert written[nvidianames.DEVICES_ALLOCATED] == f"{GPU},NVIDIA,15000,0:;"
    assert nvidianames.MIG_ALLOCATIONS not in written


def test_vgpu_mode_keeps_mig_and_hami_core_pods_apart() -> None:
    core = card("GPU-core", 0, "hami-core")
    both = node("mixed", core, card("GPU-mig", 1))
    c = Cluster(both)
    written, _ = c.place(pod("a", gpu(4000), mode="mig"))
    assert written[nvidianames.DEVICES_ALLOCATED].startswith("GPU-mig,")
    written, _ = c.place(pod("b", gpu(4000), mode="hami-core"))
    assert written[nvidianames.DEVICES_ALLOCATED] == "GPU-core,NVIDIA,4000,0:;"
    # Two cards, three asked: more than the node has, unless MIG instances may make up for it.
    _, why = c.place(pod("c", gpu(4000, nums=3), mode="hami-core"))
    assert why == "mixed: NodeInsufficientDevice"
    written, _ = c.place(pod("d", gpu(4000, nums=3), mode="mig"))
    assert written[nvidianames.DEVICES_ALLOCATED].count("GPU-mig,") == 3


def test_one_container_takes_several_instances_and_each_card_is_counted_once() -> None:
    c = Cluster()
    written, _ = c.place(pod("a", gpu(4000, nums=3)))
    starts = [
        a.instance.placement.start for a in decode_allocations(written[nvidianames.MIG_ALLOCATIONS])
    ]
    assert starts == [6, 5, 4]
    assert [a.device for a in decode_allocations(written[nvidianames.MIG_ALLOCATIONS])] == [0, 1, 2]
    # Four 1g.5gb placements are left; HAMi says `1/1 CardMigTopologyInfeasible,
    # 4/1 AllocatedCardsInsufficientRequest` ("mig-reason-counts").
    assert c.place(pod("b", gpu(4000, nums=5)))[1] == "a100: 1/1 AllocatedCardsInsufficientRequest"


def test_a_later_container_sees_the_instances_of_the_earlier_ones() -> None:
    c = Cluster()
    written, _ = c.place(pod("a", gpu(15000), gpu(15000)))
    got = [
        (a.container, a.instance.placement.start)
        for a in decode_allocations(written[nvidianames.MIG_ALLOCATIONS])
    ]
    assert got == [(0, 4), (1, 0)]


def test_init_containers_are_placed_as_hami_places_them_and_keep_their_slices() -> None:
    c = Cluster()
    # As in HAMi, each init container and the app containers see the node as it is, so the
    # app container may get the init container's placement (the device plugin reuses it).
    written, _ = c.place(pod("a", {}, gpu(4000), init=(gpu(4000),)))
    allocations = decode_allocations(written[nvidianames.MIG_ALLOCATIONS])
    assert [(a.container, a.instance.placement.start) for a in allocations] == [(0, 6), (2, 6)]
    assert (
        written[nvidianames.DEVICES_ALLOCATED] == f"{GPU},NVIDIA,4864,15:;;{GPU},NVIDIA,4864,15:;"
    )


def test_a_whole_card_is_the_largest_profile() -> None:
    # HAMi: 40,960 MiB (the registered memory) fits no profile: 1/1 CardMigTopologyInfeasible
    # even on an empty card ("mig-whole-card").
    c = Cluster()
    written, _ = c.place(pod("a", gpu(cores=100)))
    assert written[nvidianames.DEVICES_ALLOCATED] == f"{GPU},NVIDIA,40192,100:;"
    assert c.place(pod("b", gpu(gpumem_percentage=10)))[1] == "a100: 1/1 CardInsufficientMemory"


def test_a_percentage_is_of_the_largest_profile() -> None:
    c = Cluster()
    written, _ = c.place(pod("a", gpu(gpumem_percentage=25)))
    # 25 % of 40,192 is 10,048 MiB: more than 2g.10gb holds.
    assert decode_allocations(written[nvidianames.MIG_ALLOCATIONS])[0].instance.profile == "3g.20gb"


def test_gpucores_chooses_the_profile_too() -> None:
    # HAMi: 1g.5gb, 15 % of the SMs for a pod that asked for 20 ("mig-cores").
    c = Cluster()
    written, _ = c.place(pod("a", gpu(4000, gpucores=20)))
    assert written[nvidianames.DEVICES_ALLOCATED] == f"{GPU},NVIDIA,9856,29:;"


def test_the_quota_counts_the_profile() -> None:
    # HAMi checks 15,000 MiB against the 18,000 left and then counts 19,968 ("mig-quota").
    c = Cluster()
    c.cache.quotas.replace(
        [
            {
                "metadata": {"namespace": "ns", "name": "gpu"},
                "spec": {"hard": {"limits.nvidia.com/gpumem": "18000"}},
            }
        ]
    )
    assert c.place(pod("a", gpu(15000)))[1] == "a100: 1/1 ResourceQuotaNotFit"
    assert (
        c.place(pod("b", gpu(9000)))[0][nvidianames.DEVICES_ALLOCATED] == f"{GPU},NVIDIA,9856,29:;"
    )


def bound(name: str, devices: str, mig: str | None = None) -> dict[str, Any]:
    """A running pod as another scheduler (HAMi) left it."""
    obj = pod(name, gpu(4000))
    obj["metadata"]["annotations"] = {
        names.ASSIGNED_NODE: "a100",
        nvidianames.DEVICES_ALLOCATED: devices,
        **({} if mig is None else {nvidianames.MIG_ALLOCATIONS: mig}),
    }
    obj["spec"]["nodeName"] = "a100"
    return obj


def one(profile: str, start: int, size: int, gpu: str = GPU, **runtime: Any) -> str:
    instance = MigInstance(profile, MigPlacement(start, size), **runtime)
    return encode_allocations((MigAllocation(0, 0, gpu, instance),))


def test_usage_is_rebuilt_from_running_pods_mig_allocations() -> None:
    c = Cluster()
    c.cache.upsert_pod(bound("hami-placed", f"{GPU},NVIDIA,19968,43:;", one("3g.20gb", 0, 4)))
    written, _ = c.place(pod("a", gpu(15000)))
    assert decode_allocations(written[nvidianames.MIG_ALLOCATIONS])[0].instance.placement.start == 4
    state = c.cache.view["a100"].cards[0]
    assert (state.usage.used, state.usage.usedmem, state.usage.usedcores) == (2, 39936, 86)


@pytest.mark.parametrize(
    ("mig", "why"),
    [
        (None, "a MIG card held without a MIG allocation"),
        (one("1g.5gb", 0, 1, gpu="GPU-elsewhere"), "an allocation naming a card the node lacks"),
        ('[{"containerIndex":0}]', "an allocation HAMi cannot decode"),
    ],
)
def test_a_card_whose_mig_bookkeeping_does_not_add_up_is_not_trusted(
    mig: str | None, why: str
) -> None:
    c = Cluster()
    c.cache.upsert_pod(bound("odd", f"{GPU},NVIDIA,4864,15:;", mig))
    assert c.place(pod("a", gpu(4000)))[1] == "a100: 1/1 CardNotHealth", why
    c.cache.delete_pod(bound("odd", ""))
    assert c.place(pod("a", gpu(4000)))[0], "trusted again once the pod is gone"


def test_a_mig_allocation_on_a_card_not_in_mig_mode_is_not_trusted() -> None:
    c = Cluster(node("a100", card(mode="hami-core")))
    c.cache.upsert_pod(bound("odd", f"{GPU},NVIDIA,4864,15:;", one("1g.5gb", 0, 1)))
    assert c.place(pod("a", gpu(4000)))[1] == "a100: 1/1 CardNotHealth"
    # The card switched to MIG mode: the same pod now adds up.
    c.cache.upsert_node(node())
    assert (
        c.place(pod("a", gpu(4000)))[0][nvidianames.DEVICES_ALLOCATED] == f"{GPU},NVIDIA,4864,15:;"
    )


def test_preempting_a_mig_pod_frees_its_slices() -> None:
    info = decode_node_devices(node()["metadata"]["annotations"][nvidianames.NODE_REGISTER])
    held = MigInstance("3g.20gb", MigPlacement(4, 4))
    other = MigInstance("3g.20gb", MigPlacement(0, 4))

    def victim(name: str, instance: MigInstance, priority: int) -> Victim:
        return Victim(name, "ns", name, priority, 0, {GPU: Usage(1, 19968, 43, (instance,))})

    low, high = victim("low", held, 1), victim("high", other, 100)
    usage = {GPU: low.usage[GPU] + high.usage[GPU]}
    state = build_node("a100", info, usage, registry=FAMILIES)
    request = pod_request(pod("p", gpu(15000))["spec"], ResourceDefaults())
    plan = victims_on(
        state, [low, high], Preemptor(request, pod_options({}), 10, families=FAMILIES)
    )
    assert plan is not None and [v.name for v in plan.victims] == ["low"]
    assert plan.devices[0][0].mig == MigInstance("3g.20gb", MigPlacement(4, 4))


def test_registration_reads_go_json_as_hami_does() -> None:
    raw = orjson.dumps(
        [
            {
                "ID": GPU,
                "count": 7,
                "devmem": 40960,
                "mode": "mig",
                "type": "NVIDIA A100-SXM4-40GB",
                "health": True,
                "MIGPROFILES": [
                    {
                        "Name": "1g.5gb",
                        "memorymb": 4864,
                        "core": 15,
                        "slicecount": 1,
                        "placements": [{"START": 6, "size": 1}],
                    },
                    {"name": "2g.10gb", "memoryMB": None, "placements": None},
                ],
            }
        ]
    ).decode()
    (got,) = decode_node_devices(raw)
    assert got.id == GPU and got.mig
    assert [(p.name, p.memory, p.placements) for p in got.mig_profiles] == [
        ("1g.5gb", 4864, (MigPlacement(6, 1),)),
        ("2g.10gb", 0, ()),
    ]


def test_a_card_an_older_plugin_registered_in_mig_mode_fits_nothing() -> None:
    # v2.9's device plugin wrote `migtemplate`, which v2.10 no longer reads: no profiles.
    legacy = card()
    del legacy["migProfiles"]
    legacy["migtemplate"] = [[{"name": "1g.5gb", "memory": 4864, "count": 7}]]
    assert Cluster(node("a100", legacy)).place(pod("a", gpu(4000)))[1] == (
        "a100: 1/1 CardMigTopologyInfeasible"
    )


@pytest.mark.parametrize(
    ("profiles", "message"),
    [
        ([{"name": "1g", "placements": [{"start": 0, "size": 0}]}], "at least one slice"),
        ([{"name": "1g", "placements": [{"start": -1, "size": 1}]}], "start must be an integer"),
        ([{"name": 1}], "name must be a string"),
        ({"name": "1g"}, "migProfiles must be a JSON array"),
    ],
)
def test_a_malformed_profile_list_is_refused_naming_it(profiles: Any, message: str) -> None:
    entry = card()
    entry["migProfiles"] = profiles
    with pytest.raises(CodecError, match=message):
        decode_node_devices(orjson.dumps([entry]).decode())


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"G","profile":"1g.5gb"}]', "incomplete"),
        (
            '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"G","profile":"1g.5gb",'
            '"placement":{"start":0,"size":1},"migUUID":"MIG-x"}]',
            "partial runtime identity",
        ),
        (
            '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"G","profile":"p","placement":{"start":0,"size":1}},'
            '{"containerIndex":0,"deviceIndex":0,"gpuUUID":"G","profile":"p","placement":{"start":1,"size":1}}]',
            "duplicate MIG allocation for container 0 device 0",
        ),
        ("{", "not valid JSON"),
    ],
)
def test_allocations_are_checked_as_hamis_decoder_checks_them(value: str, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        decode_allocations(value)


def test_allocations_with_runtime_identity_round_trip_as_go_writes_them() -> None:
    value = one("1g.5gb", 3, 1, uuid="MIG-4f1b<&>", gpu_instance=0, compute_instance=0)
    assert value == (
        f'[{{"containerIndex":0,"deviceIndex":0,"gpuUUID":"{GPU}","profile":"1g.5gb",'
        '"placement":{"start":3,"size":1},"migUUID":"MIG-4f1b\\u003c\\u0026\\u003e",'
        '"gpuInstanceID":0,"computeInstanceID":0}]'
    )
    (got,) = decode_allocations(value)
    assert got.instance.ready and got.instance.uuid == "MIG-4f1b<&>"
    assert encode_allocations((got,)) == value


def test_topology_aware_chooses_among_instances_then_places_them_in_order() -> None:
    # HAMi collects every instance every card could give, picks the best-linked pair, and
    # places the chosen ones again card by card: one on each card, each the first 1g.5gb slot.
    a, b = card("GPU-a", 0), card("GPU-b", 1)
    info = decode_node_devices(
        node("a100", a, b)["metadata"]["annotations"][nvidianames.NODE_REGISTER]
    )
    links = {"GPU-a": {"GPU-b": 100}, "GPU-b": {"GPU-a": 100}}
    state = build_node("a100", info, links=links, registry=FAMILIES)
    request = pod_request(pod("p", gpu(4000, nums=2))["spec"], ResourceDefaults())
    opts = pod_options({names.GPU_POLICY: "topology-aware"})
    decision = schedule({"a100": state}, request, opts, families=FAMILIES)
    assert decision.devices is not None
    got = [(d.uuid, d.mig and label(d.mig)) for d in decision.devices[0]]
    assert sorted(got) == [("GPU-a", "1g.5gb@6"), ("GPU-b", "1g.5gb@6")]
    # Without link scores the first pair collected wins: two instances of one card.
    decision = schedule(
        {"a100": build_node("a100", info, registry=FAMILIES)}, request, opts, families=FAMILIES
    )
    assert decision.devices is not None
    assert [label(d.mig) for d in decision.devices[0] if d.mig] == ["1g.5gb@6", "1g.5gb@5"]


def test_bind_re_check_counts_placements_not_rounded_cores_and_names_a_clash() -> None:
    # The issue's reproduction: seven 1g.5gb fill an A100-40GB and count 105 % of its cores.
    c = Cluster(node("a100", card(profiles=A100_40GB)))
    for i in range(7):
        written, why = c.place(pod(f"p{i}", gpu(4000)))
        assert why == "", (i, why)
        devices = decode_pod_devices(written[nvidianames.DEVICES_ALLOCATED])
        held = with_instances(devices, decode_allocations(written[nvidianames.MIG_ALLOCATIONS]))
        assert c.cache.overcommitted("a100", held) == [], i
    assert c.cache.view["a100"].cards[0].usage.usedcores == 105
    # A decision for the slice p0 holds (an older leader's, say) is refused, naming the clash.
    late = ((ContainerDevice(GPU, 4864, 15, mig=MigInstance("1g.5gb", MigPlacement(6, 1))),),)
    c.cache.reserve("late", "ns", "late", "a100", late, 0)
    assert c.cache.overcommitted("a100", late) == [
        f"{GPU} (its MIG instance 1g.5gb@6 overlaps 1g.5gb@6)"
    ]
