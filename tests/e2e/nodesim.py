"""Node-side simulator for e2e tests: kubelet plus HAMi's NVIDIA device plugin, minus the GPUs.

Run::

    python -m tests.e2e.nodesim --kubeconfig admin.kubeconfig --spec nodes.json

``nodes.json`` (written by :func:`tests.e2e.nodespec.dump_specs`) is the only input. The process
owns exactly the nodes it lists; to add nodes mid-test, start another process with another spec
(the ``nodesim`` fixture does that). Several simulators can run side by side because each one
acts only on pods bound to its own nodes.

What it does, and what the real components would do in its place:

* **Registration** (kubelet + device plugin): creates or updates each Node with cpu, memory, pod
  and ``nvidia.com/gpu`` capacity, the ``gpu=on`` label, and ``hami.io/node-nvidia-register``;
  a ``plugin="gke"`` node instead as GKE's own plugin and Lab 12's GPU Feature Discovery labels
  leave it (one ``nvidia.com/gpu`` per card, ``nvidia.com/gpu.*`` labels, no HAMi annotation).
  Such a node has no HAMi device plugin, so none of the handshake below happens on it, and, like
  the rest of this simulator, it does not count devices against allocatable at admission. A
  ``plugin="dra"`` node has no device plugin at all (its cards are a DRA driver's to publish).
* **Allocate** (device plugin, called by kubelet for every container that requests
  ``nvidia.com/gpu``, init containers first): finds the pending pod through the node lock, or
  failing that the first allocating pod on the node; takes the next container's devices from
  ``hami.io/vgpu-devices-to-allocate`` and checks them against the request and the node's cards;
  on cards in MIG mode creates the instances ``hami.io/vgpu-mig-allocations`` plans and records
  them there, refusing a plan that is missing or overlaps an instance (:mod:`.nodesim_mig`);
  writes the annotation back with that container emptied; once no device is left sets
  ``hami.io/bind-phase=success`` and releases the node lock. Any failure sets ``failed``,
  releases the lock, and the pod is rejected with ``UnexpectedAdmissionError`` as kubelet does.
  A family with a node lock of its own (Cambricon's dynamic-sMLU plugin: ``allocateDynamicSmlu``
  in Cambricon/cambricon-k8s-device-plugin) has no handshake: its Allocate, for each pod that
  asks the family's count resource, removes that lock from the node, whoever took it.
* **Start** (kubelet): waits until every non-optional ConfigMap and Secret the pod uses exists
  (reporting ``CreateContainerConfigError`` or ``ContainerCreating`` meanwhile), then reports
  the pod Running and Ready.
* **Deletion** (kubelet): completes graceful deletion of pods on its nodes at once.

It never picks a node or a card: every placement it acts on was written by the scheduler.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from tests.families_samples import SAMPLE_NODE

from . import nodesim_mig
from .nodespec import (
    GPU_RESOURCE,
    NodeSpec,
    load_specs,
    node_annotations,
    node_labels,
    node_resources,
    plugin_wire,
)

log = logging.getLogger("nodesim")

READY_MARKER = "nodesim ready"

BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
ASSIGNED_NODE = "hami.io/vgpu-node"
NODE_LOCK = "hami.io/mutex.lock"
VENDOR = "NVIDIA"

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

REQUEST_TIMEOUT = 30.0
WATCH_SECONDS = 300
RETRY_DELAY = 1.0

Obj = dict[str, Any]


class AdmissionError(Exception):
    """An Allocate failure; kubelet turns it into an UnexpectedAdmissionError rejection."""


@dataclass(frozen=True)
class _Ref:
    """A ConfigMap or Secret that must exist before kubelet can start the containers."""

    kind: str  # "ConfigMap" | "Secret"
    name: str
    key: str | None  # env valueFrom needs this key in the object
    volume: str | None  # set when the reference comes from a volume


class Simulator:
    def __init__(self, api: client.ApiClient, nodes: list[NodeSpec]):
        self.core = client.CoreV1Api(api)
        self.nodes = {n.name: n for n in nodes}
        # Pods bound to our nodes, by UID, as last seen on the watch.
        self.pods: dict[str, Obj] = {}
        # One queue and worker per node: kubelets are separate processes, so one node's
        # Allocate never waits for another node's.
        self.queues: dict[str, asyncio.Queue[str]] = {n.name: asyncio.Queue() for n in nodes}
        self.queued: set[str] = set()
        # The cache lags our own writes; these remember what this process already did so that a
        # stale copy of a pod never makes it allocate or start that pod twice.
        self.admitted: set[str] = set()
        self.settled: set[str] = set()
        self.waiting: dict[str, str] = {}

    async def run(self, stop: asyncio.Event) -> None:
        # A few at a time: a thousand nodes register in seconds, not minutes.
        limit = asyncio.Semaphore(16)

        async def register(node: NodeSpec) -> None:
            async with limit:
                await self._register(node)

        await asyncio.gather(*(register(n) for n in self.nodes.values()))
        rv = await self._relist()
        log.info("%s: %s", READY_MARKER, ", ".join(self.nodes))
        tasks = [
            asyncio.create_task(self._informer(rv), name="informer"),
            *(
                asyncio.create_task(self._worker(queue), name=f"worker {name}")
                for name, queue in self.queues.items()
            ),
        ]
        stopping = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([*tasks, stopping], return_when=asyncio.FIRST_COMPLETED)
        for task in [*tasks, stopping]:
            task.cancel()
        await asyncio.gather(*tasks, stopping, return_exceptions=True)
        for task in done & set(tasks):
            task.result()  # a crashed loop must fail the process, not end it quietly

    # --- API plumbing ------------------------------------------------------------------------

    async def _call(self, method: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Obj:
        """Call ``method`` without model (de)serialisation and return the JSON answer."""
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
        resp = await method(*args, _preload_content=False, **kwargs)
        try:
            body = await resp.read()
            if not 200 <= resp.status <= 299:
                raise ApiException(status=resp.status, reason=body.decode(errors="replace"))
            result: Obj = json.loads(body)
            return result
        finally:
            resp.release()

    # --- registration ------------------------------------------------------------------------

    async def _register(self, node: NodeSpec) -> None:
        hami = node.plugin == "hami"
        metadata = {
            "labels": {
                **({"gpu": "on"} if hami else {}),
                "kubernetes.io/hostname": node.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **node_labels(node),
            },
            "annotations": node_annotations(node, _now()) if hami else {},
        }
        status = _node_status(node)
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name, **metadata}}
        try:
            await self._call(self.core.create_node, {**body, "status": status})
            log.info("%s: registered", node.name)
        except ApiException as e:
            if e.status != 409:
                raise
            # Left over from an earlier run: re-register like a restarted kubelet would.
            await self._call(
                self.core.patch_node, node.name, {"metadata": metadata}, _content_type=MERGE_PATCH
            )
            await self._call(
                self.core.patch_node_status,
                node.name,
                {"status": status},
                _content_type=MERGE_PATCH,
            )
            log.info("%s: re-registered existing node", node.name)

    # --- informer ----------------------------------------------------------------------------

    async def _relist(self) -> str:
        listing = await self._call(self.core.list_pod_for_all_namespaces)
        self.pods.clear()
        for pod in listing["items"]:
            self._observe("ADDED", pod)
        rv: str = listing["metadata"]["resourceVersion"]
        return rv

    async def _informer(self, rv: str) -> None:
        while True:
            try:
                rv = await self._watch(rv)
            except ApiException as e:
                if e.status == 410:
                    log.info("watch expired at resourceVersion %s; listing again", rv)
                    rv = await self._relist_until_ok()
                else:
                    log.warning("watch failed: %s %s", e.status, e.reason)
                    await asyncio.sleep(RETRY_DELAY)
            except (aiohttp.ClientError, TimeoutError) as e:
                log.warning("watch connection lost: %r", e)
                await asyncio.sleep(RETRY_DELAY)

    async def _relist_until_ok(self) -> str:
        while True:
            try:
                return await self._relist()
            except (ApiException, aiohttp.ClientError, TimeoutError) as e:
                log.warning("list failed: %r", e)
                await asyncio.sleep(RETRY_DELAY)

    async def _watch(self, rv: str) -> str:
        # With _preload_content=False the client hands back the raw aiohttp response, whatever
        # the generated signature says.
        raw = await self.core.list_pod_for_all_namespaces(
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS,
            _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(sock_connect=10, sock_read=WATCH_SECONDS + 30),
        )
        resp = cast(aiohttp.ClientResponse, raw)
        try:
            if resp.status != 200:
                raise ApiException(status=resp.status, reason=(await resp.text())[:500])
            async for line in resp.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                rv = obj["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    self._observe(event["type"], obj)
        finally:
            resp.release()
        return rv

    def _observe(self, kind: str, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        if kind == "DELETED" or pod["spec"].get("nodeName") not in self.nodes:
            self.pods.pop(uid, None)
            self.admitted.discard(uid)
            self.settled.discard(uid)
            self.waiting.pop(uid, None)
            return
        self.pods[uid] = pod
        self._enqueue(uid)

    def _enqueue(self, uid: str) -> None:
        pod = self.pods.get(uid)
        if pod is not None and uid not in self.queued:
            self.queued.add(uid)
            self.queues[pod["spec"]["nodeName"]].put_nowait(uid)

    def _enqueue_later(self, uid: str) -> None:
        asyncio.get_running_loop().call_later(RETRY_DELAY, self._enqueue, uid)

    # --- kubelet -----------------------------------------------------------------------------

    async def _worker(self, queue: asyncio.Queue[str]) -> None:
        while True:
            uid = await queue.get()
            self.queued.discard(uid)
            pod = self.pods.get(uid)
            if pod is None:
                continue
            try:
                await self._reconcile(pod)
            except (ApiException, aiohttp.ClientError, TimeoutError) as e:
                log.warning("%s: %r; retrying", _key(pod), e)
                self._enqueue_later(uid)

    async def _reconcile(self, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        if pod["metadata"].get("deletionTimestamp"):
            await self._finish_deletion(pod)
            return
        if uid in self.settled or pod.get("status", {}).get("phase", "Pending") != "Pending":
            return
        node = self.nodes[pod["spec"]["nodeName"]]
        wire = plugin_wire(node)
        hami = node.plugin == "hami" and wire.handshake_allocate
        if hami and _gpu_requests(pod, wire.resource) and uid not in self.admitted:
            if pod["metadata"].get("annotations", {}).get(BIND_PHASE) == "success":
                self.admitted.add(uid)  # allocated before this process started
            else:
                try:
                    await self._allocate(pod)
                except AdmissionError as e:
                    await self._reject(pod, str(e))
                    return
                self.admitted.add(uid)
        elif wire.own_lock and _gpu_requests(pod, wire.resource) and uid not in self.admitted:
            await asyncio.sleep(node.allocate_delay)
            await self._remove_own_lock(node.name, wire.own_lock)
            self.admitted.add(uid)
        missing = await self._missing_reference(pod)
        if missing is not None:
            await self._report_waiting(pod, missing)
            self._enqueue_later(uid)
            return
        await self._start(pod)

    async def _finish_deletion(self, pod: Obj) -> None:
        meta = pod["metadata"]
        try:
            await self._call(
                self.core.delete_namespaced_pod,
                meta["name"],
                meta["namespace"],
                body={"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
            )
            log.info("%s: deleted", _key(pod))
        except ApiException as e:
            if e.status not in (404, 409):  # already gone, or a new pod under the same name
                raise

    async def _start(self, pod: Obj) -> None:
        now = _now()
        spec = pod["spec"]
        conditions = [
            {"type": t, "status": "True", "lastTransitionTime": now}
            for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
        ]
        if not any(
            c["type"] == "PodScheduled" and c["status"] == "True"
            for c in pod.get("status", {}).get("conditions", [])
        ):
            conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now})
        status = {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "startTime": now,
            "conditions": conditions,
            "initContainerStatuses": [
                _container_status(pod, c, now, init=True) for c in spec.get("initContainers", [])
            ],
            "containerStatuses": [
                _container_status(pod, c, now, init=False) for c in spec["containers"]
            ],
        }
        await self._patch_status(pod, status)
        self.settled.add(pod["metadata"]["uid"])
        self.waiting.pop(pod["metadata"]["uid"], None)
        log.info("%s: running on %s", _key(pod), spec["nodeName"])

    async def _reject(self, pod: Obj, reason: str) -> None:
        message = f"Pod was rejected: Allocate failed due to {reason}, which is unexpected"
        status = {"phase": "Failed", "reason": "UnexpectedAdmissionError", "message": message}
        await self._patch_status(pod, status)
        self.settled.add(pod["metadata"]["uid"])
        log.warning("%s: rejected: %s", _key(pod), message)

    async def _report_waiting(self, pod: Obj, missing: _Ref) -> None:
        uid = pod["metadata"]["uid"]
        reason, message = _waiting_reason(pod, missing)
        if self.waiting.get(uid) == message:
            return
        waiting = {"waiting": {"reason": reason, "message": message}}
        status = {
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "state": waiting,
                }
                for c in pod["spec"]["containers"]
            ]
        }
        await self._patch_status(pod, status)
        self.waiting[uid] = message
        log.info("%s: waiting: %s: %s", _key(pod), reason, message)

    async def _patch_status(self, pod: Obj, status: Obj) -> None:
        meta = pod["metadata"]
        # Strategic merge keeps conditions written by others (PodScheduled) and merges ours by
        # type, as kubelet's status manager does.
        await self._call(
            self.core.patch_namespaced_pod_status,
            meta["name"],
            meta["namespace"],
            {"metadata": {"uid": meta["uid"]}, "status": status},
            _content_type=STRATEGIC_MERGE_PATCH,
        )

    async def _missing_reference(self, pod: Obj) -> _Ref | None:
        namespace = pod["metadata"]["namespace"]
        for ref in _references(pod["spec"]):
            read = (
                self.core.read_namespaced_config_map
                if ref.kind == "ConfigMap"
                else self.core.read_namespaced_secret
            )
            try:
                obj = await self._call(read, ref.name, namespace)
            except ApiException as e:
                if e.status == 404:
                    return ref
                raise
            if ref.key is not None and ref.key not in {
                **obj.get("data", {}),
                **obj.get("binaryData", {}),
                **obj.get("stringData", {}),
            }:
                return ref
        return None

    # --- device plugin -----------------------------------------------------------------------

    async def _allocate(self, pod: Obj) -> None:
        node_name = pod["spec"]["nodeName"]
        await asyncio.sleep(self.nodes[node_name].allocate_delay)
        pending = await self._pending_pod(node_name)
        if pending is None:
            raise AdmissionError(f"no binding pod found on node {node_name}")
        log.info("%s: Allocate finds %s pending on %s", _key(pod), _key(pending), node_name)
        if pending["metadata"]["uid"] != pod["metadata"]["uid"]:
            # HAMi's plugin would hand the pending pod's devices to this pod's containers.
            raise AdmissionError(f"node {node_name} is allocating {_key(pending)}, not {_key(pod)}")
        try:
            await self._allocate_containers(pending, self.nodes[node_name])
        except AdmissionError:
            await self._patch_annotations(pending, {BIND_PHASE: "failed"})
            await self._release_lock(node_name, pending)
            raise

    async def _allocate_containers(self, pod: Obj, node: NodeSpec) -> None:
        annotations = pod["metadata"].setdefault("annotations", {})
        wire = plugin_wire(node)
        segments = annotations.get(wire.to_allocate, "").split(";")
        cards = {c.uuid: c for c in node.cards}
        others = await self._other_pods(pod) if any(c.mode == "mig" for c in node.cards) else []
        for container, wanted in _gpu_requests(pod, wire.resource):
            index = next((i for i, s in enumerate(segments) if wire.vendor in s), None)
            if index is None:
                raise AdmissionError(f"device request not found for container {container}")
            devices = _decode_container(segments[index], wire.vendor)
            if len(devices) != wanted:
                raise AdmissionError("device number not matched")
            # A family's sample registration (tests/families_samples.py) names its own cards.
            unknown = [] if node.family in SAMPLE_NODE else [d for d in devices if d not in cards]
            if unknown:
                raise AdmissionError(f"device {unknown[0]} not found on node {node.name}")
            try:
                position = _container_index(pod, container)
                mig = (
                    None
                    if node.family  # MIG is NVIDIA's
                    else nodesim_mig.realize(pod, container, position, devices, cards, others)
                )
            except nodesim_mig.MigRefusedError as e:
                raise AdmissionError(str(e)) from None
            segments[index] = ""
            patch = {wire.to_allocate: ";".join(segments)}
            if mig is not None:
                patch[nodesim_mig.MIG_ALLOCATIONS] = annotations[nodesim_mig.MIG_ALLOCATIONS] = mig
            await self._patch_annotations(pod, patch)
            log.info("%s: container %s gets %s", _key(pod), container, ",".join(devices))
        if any(wire.vendor in s for s in segments):
            # The real plugin keeps waiting for an Allocate call that never comes: the pod runs,
            # bind-phase stays "allocating" and the node lock stays taken until it expires.
            log.error("%s: devices left after the last GPU container: %r", _key(pod), segments)
            return
        await self._patch_annotations(pod, {BIND_PHASE: "success"})
        await self._release_lock(node.name, pod)

    async def _other_pods(self, pod: Obj) -> list[Obj]:
        """The node's other live pods: their MIG instances are on its cards."""
        listed = await self._call(
            self.core.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={pod['spec']['nodeName']}",
        )
        items: list[Obj] = listed["items"]
        return [
            p
            for p in items
            if p["metadata"]["uid"] != pod["metadata"]["uid"]
            and not p["metadata"].get("deletionTimestamp")
            and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        ]

    async def _pending_pod(self, node_name: str) -> Obj | None:
        node = await self._call(self.core.read_node, node_name)
        lock = node["metadata"].get("annotations", {}).get(NODE_LOCK, "")
        parts = lock.split(",")
        if len(parts) == 3:
            try:
                found: Obj = await self._call(self.core.read_namespaced_pod, parts[2], parts[1])
                log.info("%s: the node lock names %s/%s", node_name, parts[1], parts[2])
                return found
            except ApiException as e:
                if e.status != 404:
                    raise
        on_node = await self._call(
            self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node_name}"
        )
        candidates: list[Obj] = on_node["items"]
        for candidate in candidates:
            annotations = candidate["metadata"].get("annotations", {})
            if (
                candidate.get("status", {}).get("phase") == "Pending"
                and BIND_TIME in annotations
                and annotations.get(BIND_PHASE) == "allocating"
                and annotations.get(ASSIGNED_NODE) == node_name
            ):
                return candidate
        return None

    async def _patch_annotations(self, pod: Obj, annotations: dict[str, str]) -> None:
        meta = pod["metadata"]
        await self._call(
            self.core.patch_namespaced_pod,
            meta["name"],
            meta["namespace"],
            {"metadata": {"annotations": annotations}},
            _content_type=MERGE_PATCH,
        )

    async def _remove_own_lock(self, node_name: str, key: str) -> None:
        """As the family's plugin after Allocate: the lock goes, unread, unfenced."""
        await self._call(
            self.core.patch_node,
            node_name,
            {"metadata": {"annotations": {key: None}}},
            _content_type=MERGE_PATCH,
        )
        log.info("%s: %s removed after Allocate", node_name, key)

    async def _release_lock(self, node_name: str, pod: Obj) -> None:
        owner = f",{pod['metadata']['namespace']},{pod['metadata']['name']}"
        for attempt in range(5):
            node = await self._call(self.core.read_node, node_name)
            lock = node["metadata"].get("annotations", {}).get(NODE_LOCK)
            if lock is None or not lock.endswith(owner):
                log.info("%s: node lock %r is not ours to release", node_name, lock)
                return
            patch = {
                "metadata": {
                    "annotations": {NODE_LOCK: None},
                    "resourceVersion": node["metadata"]["resourceVersion"],
                }
            }
            try:
                await self._call(self.core.patch_node, node_name, patch, _content_type=MERGE_PATCH)
                log.info("%s: node lock released by %s", node_name, owner[1:])
                return
            except ApiException as e:
                if e.status != 409:
                    raise
                await asyncio.sleep(0.1 * 2**attempt)
        raise AdmissionError(f"could not release the node lock on {node_name}")


# --- pure helpers ----------------------------------------------------------------------------


def _node_status(node: NodeSpec) -> Obj:
    healthy = sum(1 for c in node.cards if c.health)
    base = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    now = _now()
    if node.family:
        devices = node_resources(node)
        capacity, allocatable = {**base, **devices}, {**base, **devices}
    elif node.plugin == "dra":
        capacity, allocatable = dict(base), dict(base)
    else:
        capacity = {**base, GPU_RESOURCE: str(node.gpu_capacity)}
        # Kubelet counts only healthy devices of a registered plugin as allocatable.
        advertised = 0 if node.withdrawn else healthy * node.per_card
        allocatable = {**base, GPU_RESOURCE: str(advertised)}
    return {
        "capacity": capacity,
        "allocatable": allocatable,
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": node.name},
        ],
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "nodesim is posting ready status",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ],
    }


def _gpu_requests(pod: Obj, resource: str = GPU_RESOURCE) -> list[tuple[str, int]]:
    """(container, count of the node plugin's resource) in the order kubelet calls Allocate:
    init first. A resource kube-scheduler served through a DRA claim (KEP-5004: named in the
    pod's status.extendedResourceClaimStatus) is the DRA driver's to prepare, not the plugin's."""
    spec = pod["spec"]
    mapped = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    by_dra = {(m["containerName"], m["resourceName"]) for m in mapped.get("requestMappings", [])}
    result = []
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        if (container["name"], resource) in by_dra:
            continue
        resources = container.get("resources", {})
        value = resources.get("limits", {}).get(resource) or resources.get("requests", {}).get(
            resource
        )
        if value is not None and int(value) > 0:
            result.append((container["name"], int(value)))
    return result


def _container_index(pod: Obj, name: str) -> int:
    """The container's position, init containers first: the index HAMi's plugin looks its MIG
    allocations up by."""
    spec = pod["spec"]
    names = [c["name"] for c in [*spec.get("initContainers", []), *spec["containers"]]]
    return names.index(name)


def _decode_container(segment: str, vendor: str = VENDOR) -> list[str]:
    """UUIDs of the `vendor` devices in one container segment of a HAMi pod device string."""
    uuids = []
    for piece in segment.split(":"):
        fields = piece.split(",")
        # A family's entries may carry the card's model (AMD's): it names the vendor's word.
        if len(fields) >= 4 and vendor.lower() in fields[1].lower():
            uuids.append(fields[0])
    return uuids


def _references(spec: Obj) -> Iterator[_Ref]:
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        for source in container.get("envFrom", []):
            for field, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
                ref = source.get(field)
                if ref and not ref.get("optional"):
                    yield _Ref(kind, ref["name"], None, None)
        for env in container.get("env", []):
            value_from = env.get("valueFrom", {})
            for field, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
                ref = value_from.get(field)
                if ref and not ref.get("optional"):
                    yield _Ref(kind, ref["name"], ref["key"], None)
    for volume in spec.get("volumes", []):
        sources = [volume, *volume.get("projected", {}).get("sources", [])]
        for source in sources:
            if (ref := source.get("configMap")) and not ref.get("optional"):
                yield _Ref("ConfigMap", ref["name"], None, volume["name"])
            if (ref := source.get("secret")) and not ref.get("optional"):
                # Volumes name it secretName, projections name it name.
                yield _Ref("Secret", ref.get("secretName") or ref["name"], None, volume["name"])


def _waiting_reason(pod: Obj, ref: _Ref) -> tuple[str, str]:
    noun = "configmap" if ref.kind == "ConfigMap" else "secret"
    if ref.volume is not None:
        return (
            "ContainerCreating",
            f'MountVolume.SetUp failed for volume "{ref.volume}" : {noun} "{ref.name}" not found',
        )
    if ref.key is not None:
        namespace = pod["metadata"]["namespace"]
        return (
            "CreateContainerConfigError",
            f"couldn't find key {ref.key} in {ref.kind} {namespace}/{ref.name}",
        )
    return "CreateContainerConfigError", f'{noun} "{ref.name}" not found'


def _container_status(pod: Obj, container: Obj, now: str, *, init: bool) -> Obj:
    name = container["name"]
    status: Obj = {
        "name": name,
        "image": container.get("image", ""),
        "imageID": "",
        "containerID": f"nodesim://{pod['metadata']['uid']}/{name}",
        "restartCount": 0,
        "ready": True,
    }
    if init and container.get("restartPolicy") != "Always":
        # Plain init containers have run to completion by the time the pod is Running.
        terminated = {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}
        return {**status, "started": False, "state": {"terminated": terminated}}
    return {**status, "started": True, "state": {"running": {"startedAt": now}}}


def _key(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- entry point -----------------------------------------------------------------------------


async def _amain(kubeconfig: Path, nodes: list[NodeSpec]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    api = await config.new_client_from_config(config_file=str(kubeconfig))
    async with api:
        await Simulator(api, nodes).run(stop)
    log.info("stopped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.e2e.nodesim",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--spec", type=Path, required=True, help="JSON written by dump_specs")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s.%(msecs)03d %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
    )
    nodes = load_specs(args.spec.read_text())
    asyncio.run(_amain(args.kubeconfig, nodes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
