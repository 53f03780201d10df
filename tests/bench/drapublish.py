"""The throughput bench's DRA variant (`--dra`): every registered node's four T4s also published
in a HAMi-DRA ResourceSlice under the UUIDs the node simulator registers (each card in both
worlds), and one allocated ResourceClaim of `CLAIMED` MiB on each node's first card, its status
written as kube-scheduler's allocator writes it (the bench plays the allocator: no pod uses the
claims). Then waits, by condition, until our /metrics counts every claim. The GPU bursts that
follow are placed around the claims by the same cache that counts them. In DRA mode the bursts'
claims are released after each run (`release_claims`)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from kubernetes_asyncio import client, config

from tests.bench.pods import warn
from tests.bench.scrape import fetch
from tests.draobjects import allocated_claim, claim_request, gpu_device, mib, resource_slice
from tests.e2e.cluster import ControlPlane

NAMESPACE = "bench-dra-claims"
CLAIMED = 1000  # MiB each claim consumes
CHUNK = 200  # objects per kubectl call


def _apply(plane: ControlPlane, items: list[dict[str, Any]], *verb: str) -> None:
    for start in range(0, len(items), CHUNK):
        doc = {"apiVersion": "v1", "kind": "List", "items": items[start : start + CHUNK]}
        plane.kubectl(*verb, "-f", "-", stdin=json.dumps(doc), timeout=300)


def publish(plane: ControlPlane, count: int, timeout: float) -> None:
    started = time.monotonic()
    names = [f"n{i:04d}" for i in range(count)]
    slices = []
    for node in names:
        devices = [
            gpu_device(f"gpu-{c}", f"GPU-{node}-{c}", memory_mib=15360, index=c) for c in range(4)
        ]
        obj = resource_slice(node, devices)
        del obj["metadata"]["uid"]
        slices.append(obj)
    _apply(plane, slices, "apply")
    plane.kubectl("create", "namespace", NAMESPACE)
    claims = []
    for node in names:
        claim = allocated_claim(
            f"claim-{node}", NAMESPACE, node, [("gpu-0", {"memory": mib(CLAIMED), "cores": "0"})]
        )
        claim["spec"] = claim_request(CLAIMED, 0)
        del claim["metadata"]["uid"]
        for result in claim["status"]["allocation"]["devices"]["results"]:
            result["shareID"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{node}/gpu-0"))
        claims.append(claim)
    _apply(plane, [{k: v for k, v in c.items() if k != "status"} for c in claims], "create")
    _apply(plane, claims, "replace", "--subresource=status")
    deadline = started + timeout
    while (counted := _counted(plane)) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"{counted} of {count} DRA claims counted in /metrics in {timeout:g}s")
        time.sleep(2)
    print(f"{count} slices and claims published and counted in {time.monotonic() - started:.1f}s")


def _counted(plane: ControlPlane) -> int:
    total = 0.0
    for line in fetch(plane.metrics_url).splitlines():
        if line.startswith("hami_dra_gpu_claims{"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


PARALLEL = 16  # claims released at once


async def release_claims(kubeconfig: str, namespace: str) -> None:
    """What kube-controller-manager's claim controller does once a claim's pod is gone (it does
    not run in this plane): deallocate, drop the finalizer, delete; else the claims of a run
    would hold their cards through the next. A failure is a warning."""
    api = await config.new_client_from_config(kubeconfig)
    try:
        objects = client.CustomObjectsApi(api)
        where = ("resource.k8s.io", "v1", namespace, "resourceclaims")
        listed = await objects.list_namespaced_custom_object(*where, _request_timeout=300)
        names = [c["metadata"]["name"] for c in listed.get("items") or ()]
        gate = asyncio.Semaphore(PARALLEL)

        async def one(name: str) -> None:
            async with gate:
                await objects.patch_namespaced_custom_object_status(
                    *where, name, [{"op": "add", "path": "/status", "value": {}}]
                )
                await objects.patch_namespaced_custom_object(
                    *where, name, [{"op": "add", "path": "/metadata/finalizers", "value": []}]
                )
                await objects.delete_namespaced_custom_object(*where, name)

        for result in await asyncio.gather(*(one(n) for n in names), return_exceptions=True):
            if isinstance(result, BaseException):
                warn(f"releasing a claim of {namespace}", result)
                break
        else:
            print(f"{len(names)} claims of {namespace} released", flush=True)
    except Exception as e:  # a warning, whatever it was
        warn(f"releasing the claims of {namespace}", e)
    finally:
        await api.close()
