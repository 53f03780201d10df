"""ResourceSlices and allocated ResourceClaims (resource.k8s.io/v1) read as cards and their
usage (hami.engine.dra)."""

from hami.engine.dra.claims import claim_usage, read_claim
from hami.engine.dra.device import DeviceUse
from hami.engine.dra.slices import card_info, published, read_slice
from hami.engine.model import Usage
from tests.draobjects import allocated_claim, dcu_device, gpu_device, mib, resource_slice


def test_a_hami_dra_slice_is_read_as_the_cards_it_publishes() -> None:
    read = read_slice(
        resource_slice(
            "n1",
            [
                gpu_device("gpu-0", "GPU-a", memory_mib=15360, index=0),
                gpu_device("gpu-1", "GPU-b", memory_mib=15360, index=1, product="Tesla V100"),
            ],
        )
    )
    assert read is not None
    first, second = read.devices
    assert (first.node, first.uuid, first.product, first.kind) == (
        "n1",
        "GPU-a",
        "Tesla T4",
        "hami-gpu",
    )
    assert (first.memory, first.cores, first.shared, second.index) == (15360, 100, True, 1)
    assert card_info(second).type == "Tesla V100" and card_info(second).devmem == 15360
    # No NUMA node published: HAMi's 0; no task bound published: the setting's default.
    assert (card_info(first).numa, card_info(first).count) == (0, 10)


def test_the_numa_node_is_read_where_published_and_the_task_bound_is_the_settings() -> None:
    """NVIDIA's and HAMi-DRA's drivers publish `numa` (an int) on their VFIO devices; no
    driver publishes a task bound: --dra-split-count gives it."""
    device = gpu_device("gpu-0", "GPU-a", memory_mib=15360)
    device["attributes"]["numa"] = {"int": 1}
    read = read_slice(resource_slice("n1", [device]), split=4)
    assert read is not None
    (card,) = read.devices
    assert (card_info(card).numa, card_info(card).count) == (1, 4)


def test_attributes_written_with_their_domain_are_read_and_other_drivers_are_not_cards() -> None:
    device = gpu_device("gpu-0", "ignored", memory_mib=1024)
    device["attributes"] = {
        "gpu.nvidia.com/uuid": {"string": "GPU-q"},
        "gpu.nvidia.com/index": {"int": 3},
    }
    device["capacity"] = {"gpu.nvidia.com/memory": {"value": "16Gi"}}
    del device["allowMultipleAllocations"]
    read = read_slice(resource_slice("n1", [device], driver="gpu.nvidia.com"))
    assert read is not None
    (d,) = read.devices
    assert (d.uuid, d.index, d.memory, d.cores, d.shared) == ("GPU-q", 3, 16384, 100, False)
    assert read_slice(resource_slice("n1", [device], driver="nic.example.com")) is None
    # NVIDIA's MIG devices are parts of a card, not cards.
    mig = {**device, "name": "gpu-0-mig-1g", "attributes": {"type": {"string": "mig"}}}
    read = read_slice(resource_slice("n1", [device, mig], driver="gpu.nvidia.com"))
    assert read is not None
    assert [(d.name, d.partition) for d in read.devices] == [
        ("gpu-0", False),
        ("gpu-0-mig-1g", True),
    ]


def test_only_the_newest_generation_of_a_pool_is_published() -> None:
    old = read_slice(
        resource_slice("n1", [gpu_device("gpu-0", "GPU-old", memory_mib=1)], generation=1)
    )
    new = read_slice(
        resource_slice("n1", [gpu_device("gpu-0", "GPU-new", memory_mib=1)], generation=2)
    )
    assert old is not None and new is not None
    assert [d.uuid for d in published([old, new]).values()] == ["GPU-new"]
    assert [d.uuid for d in published([new, old]).values()] == ["GPU-new"]


def test_an_allocated_claim_holds_what_it_consumed_or_the_whole_device() -> None:
    read = read_slice(resource_slice("n1", [gpu_device("gpu-0", "GPU-a", memory_mib=15360)]))
    assert read is not None
    devices = published([read])
    shared = read_claim(
        allocated_claim("c", "ns", "n1", [("gpu-0", {"memory": mib(4000), "cores": "30"})])
    )
    assert shared is not None and shared.uses == (
        DeviceUse(("hami-core-gpu.project-hami.io", "n1", "gpu-0"), 4000, 30),
    )
    assert claim_usage(shared, devices) == {"n1": {"GPU-a": Usage(1, 4000, 30)}}
    # Nothing recorded (no capacity asked, no default): the whole device, as the allocator takes it.
    whole = read_claim(allocated_claim("w", "ns", "n1", [("gpu-0", {})]))
    assert whole is not None and claim_usage(whole, devices) == {
        "n1": {"GPU-a": Usage(1, 15360, 100)}
    }
    # A device nobody published (yet) holds no card; an unallocated claim holds nothing.
    stray = read_claim(allocated_claim("s", "ns", "n1", [("gpu-9", {"memory": mib(1)})]))
    assert stray is not None and claim_usage(stray, devices) == {}
    pending = allocated_claim("p", "ns", "n1", [])
    del pending["status"]["allocation"]
    assert read_claim(pending) is None


def test_consumed_bytes_round_up_to_whole_mib() -> None:
    claim = read_claim(allocated_claim("c", "ns", "n1", [("gpu-0", {"memory": "1048577"})]))
    assert claim is not None and claim.uses[0].memory == 2


def test_a_card_hami_dra_publishes_by_its_minor_number_keeps_that_number() -> None:
    """HAMi-DRA's kubelet plugin (Project-HAMi/k8s-dra-driver) publishes each card as
    `hami-gpu-<minor>` with a `minor` attribute and no `index`: the card's number is that, not
    its place in the slice."""
    device = gpu_device("hami-gpu-3", "GPU-m", memory_mib=15360)
    del device["attributes"]["index"]
    device["attributes"]["minor"] = {"int": 3}
    read = read_slice(resource_slice("n", [device]))
    assert read is not None
    (only,) = read.devices
    assert only.index == 3


def test_a_published_slices_capacity_bounds_the_tasks_on_the_card() -> None:
    """Hygon's driver (HYGON-AI/k8s-hcu-dra-driver at 643ba6d) publishes `slices: 4` on each
    DCU, one consumed by every claim that asks none: kube-scheduler allocates no fifth claim
    there, so the placer counts no fifth task."""
    device = dcu_device("hcu-0", "DCU-a", memory_mib=65536)
    device["capacity"]["slices"] = {"value": "4"}
    read = read_slice(resource_slice("n1", [device], driver="dra.hygon.com"), ["dra.hygon.com"])
    assert read is not None
    assert card_info(read.devices[0]).count == 4
    fewer = read_slice(resource_slice("n1", [device], driver="dra.hygon.com"), ["dra.hygon.com"], 2)
    assert fewer is not None and card_info(fewer.devices[0]).count == 2
