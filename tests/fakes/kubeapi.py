"""An in-memory API server behind hami.kube.api.KubeAPI (and certs' CertificateAPI).

It keeps the rules the services depend on: every write bumps one cluster-wide
resourceVersion; a write with a stale resourceVersion, a create of an existing
name and a Binding of a pod that is bound, being deleted or another pod (uid)
are 409s; an absent object is a 404 (None from a get). Lists and watches
follow the same log of changes, so a watch from a list's resourceVersion sees
every later change once, and one from before `compact()` is Gone.

What a real server does when things go wrong is injected per call with
`fail(Fault(...))`: an error instead of the write, a write that lands but
whose answer is lost, an answer that comes late (past the caller's request
timeout it is a timeout, as the client reports it), and `meanwhile`, what
someone else does to the cluster while the call is in flight.
"""

import asyncio
import copy
import itertools
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from hami.kube.api import KubeAPI
from hami.kube.calls import Fence
from hami.kube.errors import Conflict, Gone, KubeError, NotFound, Unavailable

Obj = dict[str, Any]
T = TypeVar("T")
_Key = tuple[str, str]  # (namespace, name); "" for cluster-scoped objects


def conflict(what: str = "the object has been modified") -> Conflict:
    return Conflict(
        f"HTTP 409: Operation cannot be fulfilled: {what}", status=409, reason="Conflict"
    )


def server_error(status: int = 500) -> Unavailable:
    return Unavailable(f"HTTP {status}: etcdserver: request timed out", status=status)


def throttled(retry_after: float | None = None) -> Unavailable:
    return Unavailable("HTTP 429: Too Many Requests", status=429, retry_after=retry_after)


def lost() -> Unavailable:
    """What the client raises when the connection breaks before the answer arrives."""
    return Unavailable("ServerDisconnectedError: Server disconnected")


@dataclass
class Fault:
    """How the next `times` calls of `call` (a method name; "" for any) on `target` (a name;
    "" for any) go wrong; see the module docstring."""

    call: str
    error: KubeError | None = None
    lands: bool = False
    delay: float = 0.0
    times: int = 1
    target: str = ""
    meanwhile: Callable[["FakeKube"], None] | None = None


class FakeKube:
    """See the module docstring. `calls` lists (method, namespace/name, body) of every call,
    `landed` those the server carried out."""

    def __init__(self, timeout: float = 10.0) -> None:
        self.timeout = timeout  # the client's default request timeout
        self.calls: list[tuple[str, str, Any]] = []
        self.landed: list[tuple[str, str, Any]] = []
        self._faults: list[Fault] = []
        self._store: dict[str, dict[_Key, Obj]] = {}
        self._rv = itertools.count(1)
        self._last_rv = 0
        self._compacted = 0
        self._log: list[tuple[int, str, Obj]] = []  # (resourceVersion, kind, watch event)
        self._logged = asyncio.Event()
        self._names = itertools.count(1)

    # --- what tests do to the cluster -----------------------------------------------------------

    def fail(self, *faults: Fault) -> None:
        self._faults.extend(faults)

    def heal(self) -> None:
        """Drop the faults not used up yet."""
        self._faults.clear()

    def add(self, kind: str, obj: Obj) -> Obj:
        """Create (or replace) an object as someone else would; returns the stored copy."""
        meta = obj.setdefault("metadata", {})
        if kind == "pods":
            meta.setdefault("namespace", "default")
            meta.setdefault("uid", f"uid-{meta['name']}")
        existing = self._store.get(kind, {}).get(_key(obj))
        return self._put(kind, obj, "ADDED" if existing is None else "MODIFIED")

    def get(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        found = self._store.get(kind, {}).get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def edit(self, kind: str, name: str, change: Callable[[Obj], None], namespace: str = "") -> Obj:
        """Change a stored object in place as another writer would (a new resourceVersion)."""
        obj = self._stored(kind, namespace, name)
        change(obj)
        return self._put(kind, obj, "MODIFIED")

    def remove(self, kind: str, name: str, namespace: str = "") -> None:
        obj = self._store.get(kind, {}).pop((namespace, name), None)
        if obj is not None:
            obj["metadata"]["resourceVersion"] = str(self._bump())
            self._emit(kind, "DELETED", obj)

    def bind(
        self, namespace: str, name: str, node: str, annotations: Mapping[str, str] = {}
    ) -> None:
        """Someone's Binding of the pod to `node` lands."""

        def bound(pod: Obj) -> None:
            pod.setdefault("spec", {})["nodeName"] = node
            pod["metadata"].setdefault("annotations", {}).update(annotations)

        self.edit("pods", name, bound, namespace)

    def compact(self) -> None:
        """Forget the change log: a watch from any resourceVersion so far is Gone."""
        self._compacted = self._last_rv
        self._log.clear()

    def written(self, method: str) -> list[tuple[str, str, Any]]:
        return [c for c in self.calls if c[0] == method]

    # --- pods -----------------------------------------------------------------------------------

    async def get_pod(self, namespace: str, name: str) -> Obj | None:
        return await self._serve(
            "get_pod", namespace, name, None, lambda: self.get("pods", name, namespace)
        )

    async def patch_pod_metadata(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        labels: Mapping[str, str | None],
    ) -> Obj:
        def apply() -> Obj:
            pod = self._stored("pods", namespace, name)
            meta = pod["metadata"]
            for field, values in (("annotations", annotations), ("labels", labels)):
                if values:
                    meta[field] = _merge(meta.get(field) or {}, dict(values))
            return self._put("pods", pod, "MODIFIED")

        body = {"annotations": dict(annotations), "labels": dict(labels)}
        return await self._serve("patch_pod_metadata", namespace, name, body, apply)

    async def ungate_pod(self, namespace: str, name: str, uid: str, gates: list[Obj]) -> Obj:
        def apply() -> Obj:
            pod = self._stored("pods", namespace, name)
            if pod["metadata"].get("uid") != uid:
                raise KubeError(f"pods {namespace}/{name}: test of its uid failed", status=422)
            if gates:
                pod["spec"]["schedulingGates"] = gates
            else:
                pod["spec"].pop("schedulingGates", None)
            return self._put("pods", pod, "MODIFIED")

        return await self._serve("ungate_pod", namespace, name, gates, apply)

    async def get_resource_claim(self, namespace: str, name: str) -> Obj | None:
        return await self._serve(
            "get_resource_claim",
            namespace,
            name,
            None,
            lambda: self.get("resourceclaims", name, namespace),
        )

    async def delete_resource_claim(
        self, namespace: str, name: str, uid: str, resource_version: str
    ) -> None:
        def apply() -> None:
            claim = self._stored("resourceclaims", namespace, name)
            meta = claim["metadata"]
            if (meta.get("uid"), meta.get("resourceVersion")) != (uid, resource_version):
                raise Conflict(f"resourceclaims {namespace}/{name}: precondition failed")
            self.remove("resourceclaims", name, namespace)

        await self._serve("delete_resource_claim", namespace, name, None, apply)

    async def create_resource_claim(self, namespace: str, body: Obj) -> Obj:
        return await self._serve(
            "create_resource_claim",
            namespace,
            "",
            body,
            lambda: self._create("resourceclaims", namespace, body),
        )

    async def patch_pod_status(self, namespace: str, name: str, status: Obj) -> Obj:
        def apply() -> Obj:
            pod = self._stored("pods", namespace, name)
            current = pod.setdefault("status", {})
            for k, v in status.items():
                if k == "conditions":
                    by_type = {c["type"]: c for c in current.get("conditions") or []}
                    by_type.update({c["type"]: c for c in v})
                    current["conditions"] = list(by_type.values())
                else:
                    current[k] = v
            return self._put("pods", pod, "MODIFIED")

        return await self._serve("patch_pod_status", namespace, name, status, apply)

    async def bind_pod(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        annotations: Mapping[str, str],
        labels: Mapping[str, str],
        request_timeout: float | None = None,
        fence: Fence | None = None,
        resource_version: str = "",
    ) -> None:
        def apply() -> None:
            pod = self._stored("pods", namespace, name)
            meta = pod["metadata"]
            if uid and meta.get("uid") != uid:
                raise conflict(f"Precondition failed: UID in precondition: {uid}")
            if resource_version and meta.get("resourceVersion") != resource_version:
                raise conflict(
                    "Operation cannot be fulfilled on pods: the object has been modified; "
                    "please apply your changes to the latest version and try again"
                )
            if meta.get("deletionTimestamp"):
                raise conflict(f"pod {name} is being deleted, cannot be assigned to a host")
            bound_to = (pod.get("spec") or {}).get("nodeName")
            if bound_to:
                raise conflict(f'pod {name} is already assigned to node "{bound_to}"')
            pod.setdefault("spec", {})["nodeName"] = node
            if annotations:
                meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
            if labels:
                meta["labels"] = {**(meta.get("labels") or {}), **labels}
            self._put("pods", pod, "MODIFIED")

        body = {
            "node": node,
            "uid": uid,
            "annotations": dict(annotations),
            "labels": dict(labels),
            "resourceVersion": resource_version,
        }
        await self._serve("bind_pod", namespace, name, body, apply, request_timeout, fence)

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        def apply() -> None:
            pod = self._stored("pods", namespace, name)
            if uid and pod["metadata"].get("uid") != uid:
                raise conflict(f"Precondition failed: UID in precondition: {uid}")
            # Graceful deletion: the pod stays, terminating, until its kubelet is done with it
            # (a test removes it).
            pod["metadata"].setdefault("deletionTimestamp", _now())
            self._put("pods", pod, "MODIFIED")

        await self._serve("evict_pod", namespace, name, uid, apply)

    async def list_pod_disruption_budgets(self) -> list[Obj]:
        return await self._serve(
            "list_pod_disruption_budgets", "", "", None, lambda: self._all("poddisruptionbudgets")
        )

    # --- nodes and leases -----------------------------------------------------------------------

    async def get_node(self, name: str) -> Obj | None:
        return await self._serve("get_node", "", name, None, lambda: self.get("nodes", name))

    async def patch_node_annotations(
        self,
        name: str,
        annotations: Mapping[str, str | None],
        resource_version: str,
        request_timeout: float | None = None,
        fence: Fence | None = None,
    ) -> Obj:
        def apply() -> Obj:
            node = self._stored("nodes", "", name)
            if node["metadata"]["resourceVersion"] != resource_version:
                raise conflict(f'nodes "{name}": the object has been modified')
            node["metadata"]["annotations"] = _merge(
                node["metadata"].get("annotations") or {}, dict(annotations)
            )
            return self._put("nodes", node, "MODIFIED")

        body = dict(annotations)
        return await self._serve(
            "patch_node_annotations", "", name, body, apply, request_timeout, fence
        )

    async def get_lease(self, namespace: str, name: str) -> Obj | None:
        return await self._serve(
            "get_lease", namespace, name, None, lambda: self.get("leases", name, namespace)
        )

    # --- events, ConfigMaps, Secrets, webhook configurations ------------------------------------

    async def create_event(self, namespace: str, event: Obj) -> Obj:
        return await self._serve(
            "create_event", namespace, "", event, lambda: self._create("events", namespace, event)
        )

    async def patch_event(self, namespace: str, name: str, patch: Obj) -> Obj:
        def apply() -> Obj:
            return self._put(
                "events", _merge(self._stored("events", namespace, name), patch), "MODIFIED"
            )

        return await self._serve("patch_event", namespace, name, patch, apply)

    def events(self, reason: str = "") -> list[Obj]:
        return [e for e in self._all("events") if not reason or e.get("reason") == reason]

    async def get_configmap(self, namespace: str, name: str) -> Obj | None:
        return await self._serve(
            "get_configmap", namespace, name, None, lambda: self.get("configmaps", name, namespace)
        )

    async def create_configmap(self, namespace: str, body: Obj) -> Obj:
        return await self._serve(
            "create_configmap",
            namespace,
            "",
            body,
            lambda: self._create("configmaps", namespace, body),
        )

    async def replace_configmap(self, namespace: str, name: str, body: Obj) -> Obj:
        return await self._serve(
            "replace_configmap",
            namespace,
            name,
            body,
            lambda: self._replace("configmaps", namespace, name, body),
        )

    async def get_secret(self, namespace: str, name: str) -> Obj | None:
        return await self._serve(
            "get_secret", namespace, name, None, lambda: self.get("secrets", name, namespace)
        )

    async def create_secret(self, namespace: str, body: Obj) -> Obj:
        return await self._serve(
            "create_secret", namespace, "", body, lambda: self._create("secrets", namespace, body)
        )

    async def update_secret(self, namespace: str, name: str, body: Obj) -> Obj:
        return await self._serve(
            "update_secret",
            namespace,
            name,
            body,
            lambda: self._replace("secrets", namespace, name, body),
        )

    async def get_mutating_webhook_configuration(self, name: str) -> Obj | None:
        return await self._serve(
            "get_mutating_webhook_configuration",
            "",
            name,
            None,
            lambda: self.get("mutatingwebhookconfigurations", name),
        )

    async def patch_mutating_webhook_configuration(self, name: str, operations: list[Obj]) -> Obj:
        def apply() -> Obj:
            patched = _json_patch(
                self._stored("mutatingwebhookconfigurations", "", name), operations
            )
            return self._put("mutatingwebhookconfigurations", patched, "MODIFIED")

        return await self._serve(
            "patch_mutating_webhook_configuration", "", name, operations, apply
        )

    # --- lists and watches ----------------------------------------------------------------------

    async def list_pages(
        self,
        resource: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        namespace: str | None = None,
    ) -> AsyncGenerator[tuple[list[Obj], str], None]:
        def apply() -> tuple[list[Obj], str]:
            items = [o for o in self._all(resource) if _selected(o, namespace, field_selector)]
            return items, str(self._last_rv)

        yield await self._serve("list_pages", namespace or "", resource, None, apply)

    async def list_objects(self, resource: str) -> tuple[list[Obj], str]:
        pages = [page async for page in self.list_pages(resource)]
        return pages[0]

    async def watch_objects(
        self,
        resource: str,
        resource_version: str,
        *,
        timeout_seconds: int,
        inactivity: float,
        label_selector: str | None = None,
        field_selector: str | None = None,
        namespace: str | None = None,
        connected: Callable[[], None] | None = None,
    ) -> AsyncGenerator[Obj, None]:
        since = int(resource_version or 0)
        await self._serve(
            "watch_objects", namespace or "", resource, resource_version, lambda: None
        )
        if since < self._compacted:
            raise Gone(f"watch {resource}: too old resource version: {since}", status=410)
        if connected is not None:
            connected()
        while True:
            pending = [
                copy.deepcopy(event)
                for rv, kind, event in self._log
                if rv > since
                and kind == resource
                and _selected(event["object"], namespace, field_selector)
            ]
            for event in pending:
                since = int(event["object"]["metadata"]["resourceVersion"])
                yield event
            if not pending:
                try:
                    await asyncio.wait_for(self._logged.wait(), inactivity)
                except TimeoutError:
                    raise Unavailable(f"watch {resource}: TimeoutError") from None

    # --- the server's own rules -----------------------------------------------------------------

    async def _serve(
        self,
        call: str,
        namespace: str,
        name: str,
        body: Any,
        apply: Callable[[], T],
        request_timeout: float | None = None,
        fence: Fence | None = None,
    ) -> T:
        target = f"{namespace}/{name}" if namespace else name
        if fence is not None:
            fence()  # the client's last check before sending: nothing reaches the server
        self.calls.append((call, target, copy.deepcopy(body)))
        await asyncio.sleep(0)  # other callers run meanwhile, as over a connection

        def carry_out() -> T:
            result = apply()
            self.landed.append((call, target, copy.deepcopy(body)))
            return result

        fault = next(
            (f for f in self._faults if f.call in ("", call) and f.target in ("", name)), None
        )
        if fault is None:
            return carry_out()
        fault.times -= 1
        if fault.times <= 0:
            self._faults.remove(fault)
        if fault.meanwhile is not None:
            fault.meanwhile(self)
        if fault.lands:
            result = carry_out()
            await self._late(fault, call, target, request_timeout)
            return result
        await self._late(fault, call, target, request_timeout)
        return carry_out()

    async def _late(
        self, fault: Fault, call: str, target: str, request_timeout: float | None
    ) -> None:
        limit = request_timeout or self.timeout
        if fault.delay:
            await asyncio.sleep(min(fault.delay, limit))
            if fault.delay > limit:
                raise Unavailable(f"{call} {target}: TimeoutError")
        if fault.error is not None:
            raise fault.error

    def _bump(self) -> int:
        self._last_rv = next(self._rv)
        return self._last_rv

    def _put(self, kind: str, obj: Obj, event: str) -> Obj:
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(self._bump())
        self._store.setdefault(kind, {})[_key(stored)] = stored
        self._emit(kind, event, stored)
        return copy.deepcopy(stored)

    def _emit(self, kind: str, type_: str, obj: Obj) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        self._log.append((rv, kind, {"type": type_, "object": copy.deepcopy(obj)}))

        # Every watch waiting for a change wakes up and reads the log.
        self._logged.set()
        self._logged = asyncio.Event()

    def _stored(self, kind: str, namespace: str, name: str) -> Obj:
        found = self._store.get(kind, {}).get((namespace, name))
        if found is None:
            raise NotFound(f'HTTP 404: {kind} "{name}" not found', status=404, reason="NotFound")
        return copy.deepcopy(found)

    def _create(self, kind: str, namespace: str, body: Obj) -> Obj:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = namespace
        if not meta.get("name"):
            meta["name"] = f"{meta.get('generateName', kind)}{next(self._names)}"
        if (namespace, meta["name"]) in self._store.get(kind, {}):
            raise conflict(f'{kind} "{meta["name"]}" already exists')
        meta.setdefault("creationTimestamp", _now())
        return self._put(kind, obj, "ADDED")

    def _replace(self, kind: str, namespace: str, name: str, body: Obj) -> Obj:
        current = self._stored(kind, namespace, name)
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            raise conflict(f'{kind} "{name}": the object has been modified')
        obj = copy.deepcopy(body)
        obj["metadata"]["namespace"] = current["metadata"].get("namespace", "")
        obj["metadata"]["name"] = name
        return self._put(kind, obj, "MODIFIED")

    def _all(self, kind: str) -> list[Obj]:
        return [copy.deepcopy(o) for o in self._store.get(kind, {}).values()]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key(obj: Mapping[str, Any]) -> _Key:
    meta = obj["metadata"]
    return (str(meta.get("namespace") or ""), str(meta["name"]))


def _merge(current: Obj, patch: Mapping[str, Any]) -> Obj:
    """RFC 7386 JSON merge patch."""
    merged = dict(current)
    for k, v in patch.items():
        if v is None:
            merged.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(merged.get(k), dict):
            merged[k] = _merge(merged[k], v)
        else:
            merged[k] = copy.deepcopy(v)
    return merged


def _json_patch(obj: Obj, operations: list[Obj]) -> Obj:
    """RFC 6902, the `test` and `replace`/`add` operations certs' bootstrap sends; a failed
    test changes nothing."""
    patched = copy.deepcopy(obj)
    for op in operations:
        parts = op["path"].strip("/").split("/")
        parent: Any = patched
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last: Any = int(parts[-1]) if isinstance(parent, list) else parts[-1]
        if op["op"] == "test":
            if parent[last] != op["value"]:
                raise KubeError("the test operation failed", status=422)
        else:
            parent[last] = op["value"]
    return patched


def _selected(obj: Mapping[str, Any], namespace: str | None, field_selector: str | None) -> bool:
    meta = obj.get("metadata") or {}
    if namespace and meta.get("namespace") != namespace:
        return False
    if field_selector and field_selector.startswith("metadata.name="):
        return bool(meta.get("name") == field_selector.partition("=")[2])
    return True


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run until `condition` holds: what the code under test does with the fake's
    answers, polled without a clock (a test's own timeout catches a hang)."""
    for _ in range(10**6):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the condition never held")


def _is_kube_api(kube: FakeKube) -> KubeAPI:
    """mypy checks here that the fake is a KubeAPI (a Protocol is checked where it is used)."""
    return kube
