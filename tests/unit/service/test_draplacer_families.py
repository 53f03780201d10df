"""The DRA placer over every family a DRA driver publishes (docs/dra.md, "The DRA view"): a
Hygon pod's DCU is chosen by the pod's GPU policy among the DCUs `dra.hygon.com` publishes,
as an NVIDIA pod's card is among HAMi-DRA's GPUs, in one cluster and on one node."""

import asyncio
from typing import Any

import pytest

from hami.cache.store import ClusterCache
from hami.engine.dra.translate import restore
from hami.engine.families.hygon import DRA_DRIVER as DCU_DRIVER
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.service.draplacer import DraPlacer, gated
from hami.service.placement import Placement
from tests.builders import FAMILIES, T4_MIB
from tests.draobjects import allocated_claim, dcu_device, gpu_device, resource_slice
from tests.drapods import DRA, GPU_LIMITS, stored_pod
from tests.fakes.clock import Clock
from tests.fakes.kubeapi import FakeKube

DCU_MIB = 16384
DCU_LIMITS = {"hygon.com/dcunum": 1, "hygon.com/dcumem": 2000, "hygon.com/dcucores": 30}
DCU_PCI = [(0, "0000:3b:00.0"), (1, "0000:86:00.0")]


def dra_pod(name: str, limits: dict[str, int], policy: str = "") -> dict[str, Any]:
    annotations = {"hami.io/gpu-scheduler-policy": policy} if policy else {}
    return stored_pod(name, f"uid-{name}", limits, annotations)


def cluster() -> ClusterCache:
    """Node h: two DCUs (DCU-0 holding a claim of 1000 MiB) and two T4s, each published by its
    family's DRA driver; no device plugin registers any of them. The DCUs are listed out of
    their PCI order, as Hygon's driver may list them."""
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults())
    dcus = [dcu_device(pci, f"DCU-{i}", memory_mib=DCU_MIB) for i, pci in reversed(DCU_PCI)]
    gpus = [gpu_device(f"gpu-{i}", f"GPU-{i}", memory_mib=T4_MIB, index=i) for i in range(2)]
    cache.dra.replace_slices(
        [
            resource_slice("h", dcus, driver=DCU_DRIVER, name="h-dcus", uid="s-dcu"),
            resource_slice("h", gpus, name="h-gpus", uid="s-gpu"),
        ]
    )
    held = allocated_claim(
        "held",
        "ns",
        "h",
        [("hcu-0000-3b-00-0", {"memory": f"{1000 * 2**20}", "cores": "0", "slices": "1"})],
        driver=DCU_DRIVER,
    )
    cache.dra.replace_claims([held])
    return cache


def place(kube: FakeKube, cache: ClusterCache, pod: dict[str, Any]) -> dict[str, Any]:
    """Place the stored pod as the leader's placer does; the claim it made."""
    over_dra = Placement(cache, Defaults(), ResourceDefaults(), states=cache.dra_view)
    placer = DraPlacer(
        kube,
        over_dra,
        DRA,
        lambda: True,
        cache.dra.nodes,
        scheduler_name="hami-scheduler",
        report=lambda outcome: None,  # what a refusal reports is test_draplacer's
    )
    kube.add("pods", pod)
    meta = pod["metadata"]
    assert asyncio.run(placer.place("ns", meta["name"], meta["uid"])) is True
    after = kube.get("pods", meta["name"], "ns")
    assert after is not None and not gated(after)
    claim = kube.get("resourceclaims", f"{meta['name']}-c", "ns")
    assert claim is not None
    return claim


def pinned_to(claim: dict[str, Any]) -> tuple[str, str]:
    """(DeviceClass, the selector's expression) of the claim's one request."""
    (request,) = claim["spec"]["devices"]["requests"]
    (selector,) = request["exactly"]["selectors"]
    return request["exactly"]["deviceClassName"], selector["cel"]["expression"]


@pytest.mark.parametrize(("policy", "dcu"), [("binpack", "DCU-0"), ("spread", "DCU-1")])
def test_a_hygon_pod_gets_the_dcu_its_policy_chooses(policy: str, dcu: str) -> None:
    claim = place(FakeKube(), cluster(), dra_pod("p", DCU_LIMITS, policy))
    device_class, expression = pinned_to(claim)
    assert device_class == DCU_DRIVER
    assert expression == f'device.attributes["{DCU_DRIVER}"].uuid == "{dcu}"'
    # 30 percent of the DCU's 120 compute units, the unit Hygon's driver counts cores in.
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["capacity"]["requests"] == {"memory": "2000Mi", "cores": "36"}


def test_an_nvidia_pods_claim_still_asks_cores_in_percent() -> None:
    limits = {**GPU_LIMITS, "nvidia.com/gpucores": 30}
    claim = place(FakeKube(), cluster(), dra_pod("g", limits, "binpack"))
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["capacity"]["requests"]["cores"] == "30"


def test_an_nvidia_and_a_hygon_pod_each_get_their_familys_card_on_one_node() -> None:
    kube, cache = FakeKube(), cluster()
    gpu = pinned_to(place(kube, cache, dra_pod("g", GPU_LIMITS, "binpack")))
    dcu = pinned_to(place(kube, cache, dra_pod("d", DCU_LIMITS, "binpack")))
    assert gpu[0] == "hami-core-gpu.project-hami.io" and '"GPU-' in gpu[1]
    assert dcu == (DCU_DRIVER, f'device.attributes["{DCU_DRIVER}"].uuid == "DCU-0"')


def test_a_dra_only_card_is_shared_by_the_settings_task_count() -> None:
    """--dra-split-count bounds the pods on a card only a DRA driver publishes: with 1, a
    second pod cannot join the first's card (the engine's time-slicing check)."""
    cache = ClusterCache(Clock(), families=FAMILIES, resources=ResourceDefaults(), dra_split=1)
    gpus = [gpu_device("gpu-0", "GPU-0", memory_mib=T4_MIB)]
    cache.dra.replace_slices([resource_slice("h", gpus)])
    held = allocated_claim("held", "ns", "h", [("gpu-0", {"memory": f"{2**30}", "cores": "0"})])
    cache.dra.replace_claims([held])
    (card,) = cache.dra_view()["h"].cards
    assert (card.info.count, card.usage.used) == (1, 1)
    over_dra = Placement(cache, Defaults(), ResourceDefaults(), states=cache.dra_view)
    outcome = over_dra.filter(restore(dra_pod("p", GPU_LIMITS)), ["h"])
    assert outcome.decision is None or outcome.decision.devices is None
