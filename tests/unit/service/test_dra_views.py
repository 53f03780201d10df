"""`hami status`, `hami explain` and /metrics say which world a card is in and count what the
DRA claims hold (hami.cache.dra)."""

from prometheus_client.parser import text_string_to_metric_families

from hami.cache.store import ClusterCache
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.runtime.exposition import ClusterExposition
from hami.service.explain import explain
from hami.service.status import render_json, render_text, status
from tests.builders import FAMILIES, T4_MIB, allocated_pod, gpu_pod, registered_node, t4s
from tests.draobjects import allocated_claim, gpu_device, mib, resource_slice


def mixed() -> ClusterCache:
    """n1: two cards of HAMi's device plugin, the second also in a HAMi-DRA slice with a claim
    of 12000 MiB on it; n2: one card only a DRA driver publishes, half taken by a claim."""
    cache = ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n1", t4s(2, prefix="GPU-n1"))])
    cache.dra.upsert_slice(
        resource_slice("n1", [gpu_device("gpu-1", "GPU-n1-1", memory_mib=T4_MIB, index=1)])
    )
    cache.dra.upsert_slice(resource_slice("n2", [gpu_device("gpu-0", "GPU-n2-0", memory_mib=8000)]))
    cache.dra.upsert_claim(
        allocated_claim("big", "ml", "n1", [("gpu-1", {"memory": mib(12000), "cores": "50"})])
    )
    cache.dra.upsert_claim(
        allocated_claim("half", "ml", "n2", [("gpu-0", {"memory": mib(4000), "cores": "50"})])
    )
    return cache


def test_status_shows_both_worlds_and_the_claims_holding_the_cards() -> None:
    s = status(mixed(), [], ResourceDefaults())
    text = "\n".join(render_text(s))
    assert (
        "1     GPU-n1-1  NVIDIA-Tesla T4 [both]  12000/15360   50/100   1/10  ml/big(claim)" in text
    )
    assert "0     GPU-n1-0  NVIDIA-Tesla T4             0/15360    0/100   0/10  -" in text
    assert "0     GPU-n2-0  Tesla T4 [dra]   4000/8000   50/100   1/10  ml/half(claim)" in text
    sources = {c["uuid"]: c["source"] for n in render_json(s)["nodes"] for c in n["cards"]}
    assert sources == {"GPU-n1-0": "device-plugin", "GPU-n1-1": "both", "GPU-n2-0": "dra"}


def test_explain_names_the_claim_that_leaves_no_room() -> None:
    cache = mixed()
    # Only the card the claim shares is left to the pod: 4000 MiB will not fit beside 12000.
    lines = explain(
        cache,
        gpu_pod("p", mem=4000, annotations={"nvidia.com/use-gpuuuid": "GPU-n1-1"}),
        Defaults(),
        ResourceDefaults(),
    )
    assert any("n1:" in line for line in lines), lines
    assert (
        "    12000 MiB, 50% cores of GPU-n1-1 (also the device plugin's card) held by DRA claim ml/big"
        in lines
    )


def test_metrics_say_the_world_of_every_card_and_what_the_claims_consume() -> None:
    exposition = ClusterExposition(mixed())
    body = b"".join(exposition.render(exposition.snapshot())).decode()
    samples = {
        (s.name, s.labels.get("device_uuid"), s.labels.get("source")): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    for uuid, source in (("GPU-n1-0", "device-plugin"), ("GPU-n1-1", "both"), ("GPU-n2-0", "dra")):
        assert samples[("hami_gpu_source_info", uuid, source)] == 1
    assert samples[("hami_dra_gpu_memory_allocated_bytes", "GPU-n1-1", None)] == 12000 * 2**20
    assert samples[("hami_dra_gpu_memory_limit_bytes", "GPU-n2-0", None)] == 8000 * 2**20
    # HAMi's own series carry the claim's share on the card both worlds have.
    assert samples[("hami_gpu_memory_allocated_bytes", "GPU-n1-1", None)] == 12000 * 2**20


def test_a_card_both_worlds_hold_past_its_capacity_is_named_with_the_remedy() -> None:
    cache = mixed()
    # A device-plugin pod on the card kube-scheduler's allocator gave 12000 MiB to a claim.
    pod = allocated_pod("dp", "GPU-n1-1", mem=6000, node="n1", written_node="n1")
    cache.upsert_pod(pod)
    s = status(cache, [], ResourceDefaults())
    over = {c["uuid"]: c["overcommitted"] for n in render_json(s)["nodes"] for c in n["cards"]}
    assert over == {"GPU-n1-0": "", "GPU-n1-1": "18000 MiB counted of 15360", "GPU-n2-0": ""}
    text = "\n".join(render_text(s))
    assert "OVER-COMMITTED CARDS: 1\n  card GPU-n1-1 on node n1, served by HAMi's device " in text
    assert "(18000 MiB counted of 15360): kube-scheduler's DRA allocator does not count" in text
    exposition = ClusterExposition(cache)
    body = b"".join(exposition.render(exposition.snapshot())).decode()
    flagged = {
        s.labels["device_uuid"]: s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if s.name == "hami_gpu_overcommitted"
    }
    assert flagged == {"GPU-n1-1": 1}  # only the cards of both worlds are judged
    cache.delete_pod(pod)
    assert not any(
        c.overcommitted for n in status(cache, [], ResourceDefaults()).nodes for c in n.cards
    )
