"""What must hold after any attack, computed from the API server itself.

* No card carries more than its memory, its cores or its split count, summing the allocation
  annotation of every live pod bound to the node it names, exactly as written (no vetting: this
  is what the device plugin enforces; a pod not bound there holds nothing on that node), and
  what every allocated ResourceClaim consumed of the devices DRA drivers publish (a card in
  both worlds is one card: the claims and the pods on its UUID are summed; a card only a DRA
  driver publishes is held to its published memory and cores, no split count bounds it).
* Our process's view of every card (its /metrics) equals a cache rebuilt from a fresh LIST:
  nothing an attacker did left a phantom reservation or a miscounted pod behind.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from hami.cache.store import ClusterCache
from hami.engine.codec import CodecError, decode_node_devices, decode_pod_devices
from hami.engine.dra.claims import claim_usage, read_claim
from hami.engine.dra.slices import card_info, published, read_slice
from hami.engine.model import DeviceInfo, Usage
from hami.engine.names import ASSIGNED_NODE, NODE_LOCK
from hami.engine.nvidianames import DEVICES_ALLOCATED, NODE_REGISTER
from hami.engine.requests import ResourceDefaults
from hami.engine.usage import pod_usage
from tests.builders import FAMILIES

from .cluster import ControlPlane
from .kube import Kube
from .prometheus import get

CardUsage = dict[str, Usage]  # uuid -> usage


def _items(kube: Kube, kind: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(kube("get", kind, "-A", "-o", "json").stdout)["items"]
    return items


def overcommitted(kube: Kube) -> list[str]:
    """Each card over its memory, cores or split count, as the API server's objects say."""
    nodes = _items(kube, "nodes")
    pods = [
        p for p in _items(kube, "pods") if p["status"].get("phase") not in ("Succeeded", "Failed")
    ]
    totals: CardUsage = {}
    for pod in pods:
        annotations = pod["metadata"].get("annotations") or {}
        node = annotations.get(ASSIGNED_NODE)
        if not node or node != pod["spec"].get("nodeName") or DEVICES_ALLOCATED not in annotations:
            continue
        try:
            devices = decode_pod_devices(annotations[DEVICES_ALLOCATED])
        except CodecError:
            continue
        n_init = len(pod["spec"].get("initContainers") or ())
        for uuid, u in pod_usage(devices, n_init).items():
            totals[uuid] = totals.get(uuid, Usage()) + u
    slices = published(r for s in _items(kube, "resourceslices") if (r := read_slice(s)))
    for claim in _items(kube, "resourceclaims"):
        use = read_claim(claim)
        for per_card in claim_usage(use, slices).values() if use is not None else ():
            for uuid, u in per_card.items():
                totals[uuid] = totals.get(uuid, Usage()) + u
    registered: dict[str, DeviceInfo] = {}
    for node in nodes:
        raw = (node["metadata"].get("annotations") or {}).get(NODE_REGISTER)
        registered.update((card.id, card) for card in decode_node_devices(raw or "[]"))
    dra_only = [card_info(d) for d in slices.values() if d.uuid not in registered]
    found = []
    for card in [*registered.values(), *dra_only]:
        u = totals.get(card.id, Usage())
        tasks = card.id in registered and u.used > card.count
        if u.usedmem > card.devmem or u.usedcores > card.devcore or tasks:
            found.append(f"{card.id}: {u} on {card.devmem} MiB, {card.devcore}%, {card.count}")
    return found


def rebuilt(kube: Kube) -> CardUsage:
    """Per-card usage of a cache built from a fresh LIST, as a restarted process would see it."""
    cache = ClusterCache(clock=time.monotonic, families=FAMILIES, resources=ResourceDefaults())
    cache.replace_nodes(_items(kube, "nodes"))
    cache.replace_pods(_items(kube, "pods"))
    return {c.info.id: c.usage for node in cache.view.values() for c in node.cards}


def served(control_plane: ControlPlane) -> CardUsage:
    """Per-card usage our running process reports on /metrics."""
    return card_usage(get(control_plane.metrics_url, timeout=10).decode())


def card_usage(exposition: str) -> CardUsage:
    """Per-card usage in the body of a /metrics scrape."""
    fields: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            key = {
                "hami_gpu_memory_allocated_bytes": "usedmem",
                "hami_gpu_core_allocated_ratio": "usedcores",
                "hami_gpu_shared_count": "used",
            }.get(sample.name)
            if key is not None:
                fields.setdefault(sample.labels["device_uuid"], {})[key] = sample.value
    return {
        uuid: Usage(int(f["used"]), int(f["usedmem"]) // 2**20, int(f["usedcores"]))
        for uuid, f in fields.items()
    }


def differences(a: Mapping[str, Usage], b: Mapping[str, Usage]) -> list[str]:
    return [
        f"{uuid}: {a.get(uuid, Usage())} != {b.get(uuid, Usage())}"
        for uuid in sorted({*a, *b})
        if a.get(uuid, Usage()) != b.get(uuid, Usage())
    ]


def misplaced(kube: Kube, namespace: str | None = None) -> list[str]:
    """Each bound GPU pod whose allocation is missing, names another node, or names a card its
    node does not have, and each pod the device plugin refused (UnexpectedAdmissionError); read
    from a fresh LIST."""
    cards = {
        node["metadata"]["name"]: {
            c.id
            for c in decode_node_devices(
                (node["metadata"].get("annotations") or {}).get(NODE_REGISTER) or "[]"
            )
        }
        for node in _items(kube, "nodes")
    }
    pods = _items(kube, "pods")
    found = []
    for pod in pods:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        if namespace is not None and meta["namespace"] != namespace:
            continue
        key = f"{meta['namespace']}/{meta['name']}"
        if status.get("reason") == "UnexpectedAdmissionError":
            found.append(f"{key}: refused by the device plugin: {status.get('message', '')}")
            continue
        asks = any(
            "nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {})
            for c in spec.get("containers") or ()
        )
        node = spec.get("nodeName")
        if not asks or not node:
            continue
        annotations = meta.get("annotations") or {}
        if annotations.get(ASSIGNED_NODE) != node or DEVICES_ALLOCATED not in annotations:
            found.append(f"{key}: bound to {node} without its allocation ({annotations})")
            continue
        held = {d.uuid for c in decode_pod_devices(annotations[DEVICES_ALLOCATED]) for d in c}
        foreign = held - cards.get(node, set())
        if foreign:
            found.append(f"{key}: bound to {node} but holds {sorted(foreign)}")
    return found


def locks_left(kube: Kube, nodes: list[str] | None = None) -> dict[str, str]:
    """HAMi node locks still set on `nodes` (every node when None)."""
    left = {}
    for node in _items(kube, "nodes"):
        name = node["metadata"]["name"]
        lock = (node["metadata"].get("annotations") or {}).get(NODE_LOCK)
        if (nodes is None or name in nodes) and lock:
            left[name] = lock
    return left


def consistent(
    kube: Kube,
    control_plane: ControlPlane,
    served_url: str | None = None,
    *,
    plugin_refusals: bool = False,
) -> None:
    """No card over capacity and no bound pod without its own node's cards, from a fresh LIST;
    the serving replica's /metrics (`served_url`, else the plane's own process) equal a cache
    rebuilt from that LIST. `plugin_refusals`: pods the device plugin refused are the fault's
    (a plugin cut off in the middle of an Allocate), not what the scheduler wrote."""
    assert overcommitted(kube) == []
    wrong = misplaced(kube)
    if plugin_refusals:
        wrong = [w for w in wrong if "refused by the device plugin" not in w]
    assert wrong == [], wrong
    url = served_url or control_plane.metrics_url
    counted = card_usage(get(url, timeout=10).decode())
    listed = rebuilt(kube)
    assert (
        differences(
            {k: v for k, v in counted.items() if not v.empty},
            {k: v for k, v in listed.items() if not v.empty},
        )
        == []
    )
