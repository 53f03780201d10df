"""The DRA objects reach the books through the same informer as pods and nodes, over the real
client's resource.k8s.io/v1 paths: a list that expires midway starts over, and a claim the
completed list no longer holds stops being counted."""

from hami.cache.store import ClusterCache
from hami.engine.requests import ResourceDefaults
from hami.kube.informer import Informer
from hami.runtime.podwatch import Sink
from tests.builders import FAMILIES, registered_node, t4s
from tests.draobjects import allocated_claim, gpu_device, mib, resource_slice
from tests.fakes.httpapi import Paged, Serve, run_until, serve

__all__ = ["serve"]  # the fixture, for pytest

V1 = "/apis/resource.k8s.io/v1"


def versioned(obj: dict[str, object], rv: str) -> dict[str, object]:
    obj["metadata"]["resourceVersion"] = rv  # type: ignore[index]
    return obj


async def test_slices_and_claims_are_listed_watched_and_relisted_into_the_count(
    serve: Serve,
) -> None:
    cache = ClusterCache(clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes([registered_node("n1", t4s(1, prefix="GPU-n1"))])
    card = resource_slice("n1", [gpu_device("gpu-0", "GPU-n1-0", memory_mib=15360)])
    slices = Paged([([versioned(card, "5")], "5")], per_page=10)
    gone, kept = (
        versioned(
            allocated_claim(n, "ns", "n1", [("gpu-0", {"memory": mib(m), "cores": "10"})]), "9"
        )
        for n, m in (("gone", 3000), ("kept", 2000))
    )
    # The first list expires after its first page, the claim `gone` on it; the list that
    # completes holds `kept` only.
    claims = Paged([([gone, kept], "9"), ([kept], "12")], per_page=1)
    claims.expire = {"1"}
    kube = await serve({f"{V1}/resourceslices": slices, f"{V1}/resourceclaims": claims})
    book = cache.dra
    sinks = {
        "resourceslices": Sink(book.replace_slices, book.upsert_slice, book.delete_slice),
        "resourceclaims": Sink(book.replace_claims, book.upsert_claim, book.delete_claim),
    }
    for resource, server in (("resourceslices", slices), ("resourceclaims", claims)):
        informer = Informer(kube, resource, sinks[resource])  # type: ignore[arg-type]
        await run_until(informer, lambda s=server: bool(s.watched_from()))  # type: ignore[misc]
        assert informer.synced.is_set()
    assert [q.get("continue") for q in claims.lists()] == [None, "1", None]
    (usage,) = [c.usage for c in cache.view["n1"].cards]
    assert (usage.used, usage.usedmem, usage.usedcores) == (1, 2000, 10)
    assert claims.watched_from() == ["12"]
