"""The API server client: the only place that issues requests.

Every call goes through kubernetes_asyncio's generated methods with
`_preload_content=False` and parses the body with orjson: dicts are several
times cheaper than generated models, and raw responses sidestep the library's
V1Binding deserialisation bug. Every call carries a timeout because the
library's default is to wait forever.
"""

import logging
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import aiohttp
import orjson
import yaml
from kubernetes_asyncio import config
from kubernetes_asyncio.client import (
    AdmissionregistrationV1Api,
    ApiClient,
    Configuration,
    CoordinationV1Api,
    CoreV1Api,
    PolicyV1Api,
)

from hami.kube.errors import (
    BadKubeconfig,
    Conflict,
    KubeError,
    NotFound,
    Unavailable,
    from_response,
)
from hami.kube.session import use_own_session

log = logging.getLogger(__name__)

Resource = Literal["pods", "nodes", "resourcequotas"]
Obj = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
USER_AGENT = "hami-scheduler/0.1 (python)"
# etcd caps an object at 1.5 MiB of protobuf; the same object as JSON can be
# larger, so a watch line gets generous head room before it counts as corrupt.
MAX_WATCH_LINE = 16 * 2**20
# Objects per LIST page, as client-go's reflector asks for: a page of pods is a few MiB of
# JSON, so the decoded page, not the whole cluster, is what a list holds at once.
LIST_PAGE = 500


async def connect(kubeconfig: str | None) -> ApiClient:
    """A client on its own Configuration, so nothing leaks through the library's global default.

    Order: the given kubeconfig file, then the in-cluster service account, then
    $KUBECONFIG or ~/.kube/config.
    """
    cfg = Configuration()
    source = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    in_cluster = not kubeconfig and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if not in_cluster and os.pathsep not in source:
        _check_kubeconfig(source)
    try:
        if kubeconfig:
            await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            source = "in-cluster service account"
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            await config.load_kube_config(client_configuration=cfg)
    except Exception as e:
        # The library fails in many ways on a bad file (its own ConfigException, OSError, YAML
        # errors, TypeError on a file that is YAML but not a mapping): all mean the same here.
        why = " ".join(str(e).split()) or type(e).__name__
        raise BadKubeconfig(
            f"kubeconfig {source}: {why} (give a readable kubeconfig with --kubeconfig)"
        ) from e
    api = ApiClient(cfg)
    api.user_agent = USER_AGENT
    await use_own_session(api)
    return api


def _check_kubeconfig(path: str) -> None:
    """Say plainly what is wrong with a kubeconfig file; the library's own errors for a missing
    file or one that is not a mapping are about keys it did not find."""
    where = os.path.expanduser(path)
    try:
        text = Path(where).read_text()
    except OSError as e:
        raise BadKubeconfig(
            f"kubeconfig {path}: cannot read it: {e.strerror or e} "
            "(give a readable kubeconfig with --kubeconfig)"
        ) from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise BadKubeconfig(f"kubeconfig {path} is not YAML: {' '.join(str(e).split())}") from None
    if not isinstance(doc, dict):
        raise BadKubeconfig(
            f"kubeconfig {path} is not a kubeconfig: expected a mapping with clusters, users and "
            "contexts"
        )


class Kube:
    """Typed, dict-based access to the few API calls hami needs."""

    def __init__(
        self, api: ApiClient, *, timeout: float = 10.0, list_timeout: float = 60.0
    ) -> None:
        self.api = api
        self.core = CoreV1Api(api)
        self.coordination = CoordinationV1Api(api)
        self.policy = PolicyV1Api(api)
        self.timeout = timeout
        # A page of a list is read from etcd and can be hundreds of objects: far slower than
        # a point read on a busy server.
        self.list_timeout = list_timeout

    async def close(self) -> None:
        await self.api.close()

    async def _call(
        self,
        what: str,
        method: Callable[..., Awaitable[Any]],
        *args: Any,
        request_timeout: float | None = None,
        **kwargs: Any,
    ) -> Obj:
        try:
            resp: aiohttp.ClientResponse = await method(
                *args,
                _preload_content=False,
                _request_timeout=request_timeout or self.timeout,
                **kwargs,
            )
            async with resp:
                body = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as e:
            raise Unavailable(f"{what}: {type(e).__name__}: {e}") from e
        if resp.status >= 300:
            raise from_response(resp.status, body, resp.headers, what)
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise KubeError(f"{what}: response is not JSON: {e}", status=resp.status) from e
        if not isinstance(parsed, dict):
            raise KubeError(f"{what}: response is not a JSON object", status=resp.status)
        return parsed

    async def get_pod(self, namespace: str, name: str) -> Obj | None:
        try:
            return await self._call(
                f"get pod {namespace}/{name}", self.core.read_namespaced_pod, name, namespace
            )
        except NotFound:
            return None

    async def get_node(self, name: str) -> Obj | None:
        try:
            return await self._call(f"get node {name}", self.core.read_node, name)
        except NotFound:
            return None

    async def get_lease(self, namespace: str, name: str) -> Obj | None:
        try:
            return await self._call(
                f"get lease {namespace}/{name}",
                self.coordination.read_namespaced_lease,
                name,
                namespace,
            )
        except NotFound:
            return None

    async def patch_pod_metadata(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        labels: Mapping[str, str | None],
    ) -> Obj:
        """One JSON merge patch; a None value removes the key. Returns the patched pod."""
        metadata: Obj = {}
        if annotations:
            metadata["annotations"] = dict(annotations)
        if labels:
            metadata["labels"] = dict(labels)
        # The library would pick strategic-merge-patch for a dict body; HAMi's
        # device plugin and our own tests assume plain merge-patch semantics.
        return await self._patch_pod(namespace, name, {"metadata": metadata}, MERGE_PATCH)

    async def patch_pod_status(self, namespace: str, name: str, status: Obj) -> Obj:
        """Strategic merge patch of the status subresource: conditions merge by type, as
        kube-scheduler writes them."""
        return await self._patch_pod(
            namespace, name, {"status": status}, STRATEGIC_MERGE_PATCH, status=True
        )

    async def _patch_pod(
        self, namespace: str, name: str, body: Obj, content_type: str, status: bool = False
    ) -> Obj:
        return await self._call(
            f"patch pod {namespace}/{name}" + (" status" if status else ""),
            self.core.patch_namespaced_pod_status if status else self.core.patch_namespaced_pod,
            name,
            namespace,
            body,
            _content_type=content_type,
        )

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        """POST a policy/v1 Eviction for this very pod (uid precondition); the API server
        refuses with 429 while a PodDisruptionBudget forbids it."""
        await self._call(
            f"evict pod {namespace}/{name}",
            self.core.create_namespaced_pod_eviction,
            name,
            namespace,
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": {"preconditions": {"uid": uid}},
            },
        )

    async def list_pod_disruption_budgets(self) -> list[Obj]:
        listing = await self._call(
            "list poddisruptionbudgets",
            self.policy.list_pod_disruption_budget_for_all_namespaces,
            request_timeout=self.list_timeout,
        )
        items: list[Obj] = listing.get("items") or []
        return items

    async def patch_node_annotations(
        self, name: str, annotations: Mapping[str, str | None], resource_version: str
    ) -> None:
        """Merge-patch node annotations only if the node is still at `resource_version`.

        Raises Conflict when someone else changed the node since it was read.
        """
        await self._call(
            f"patch node {name}",
            self.core.patch_node,
            name,
            {"metadata": {"annotations": dict(annotations), "resourceVersion": resource_version}},
            _content_type=MERGE_PATCH,
        )

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        """POST the pod's Binding; idempotent for a pod already bound to `node`.

        `uid` (when not empty) makes the server refuse to bind a different pod
        that reuses the name. A retried bind whose first attempt reached the
        server gets 409 "already assigned"; that is success when the pod is on
        the wanted node, and a Conflict otherwise.
        """
        what = f"bind pod {namespace}/{name} to node {node}"
        metadata: Obj = {"name": name, "namespace": namespace}
        if uid:
            metadata["uid"] = uid
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            await self._call(what, self.core.create_namespaced_pod_binding, name, namespace, body)
        except Conflict:
            pod = await self.get_pod(namespace, name)
            if pod is None:
                raise NotFound(f"{what}: the pod no longer exists", status=404) from None
            bound_to = pod.get("spec", {}).get("nodeName")
            same_pod = not uid or pod.get("metadata", {}).get("uid") == uid
            if same_pod and bound_to == node:
                log.info(
                    "pod was already bound to this node",
                    extra={"namespace": namespace, "pod": name, "node": node},
                )
                return
            raise

    async def create_event(self, namespace: str, event: Obj) -> Obj:
        return await self._call(
            f"create event in {namespace}", self.core.create_namespaced_event, namespace, event
        )

    async def patch_event(self, namespace: str, name: str, patch: Obj) -> Obj:
        return await self._call(
            f"patch event {namespace}/{name}",
            self.core.patch_namespaced_event,
            name,
            namespace,
            patch,
            _content_type=MERGE_PATCH,
        )

    async def get_configmap(self, namespace: str, name: str) -> Obj | None:
        try:
            return await self._call(
                f"get configmap {namespace}/{name}",
                self.core.read_namespaced_config_map,
                name,
                namespace,
            )
        except NotFound:
            return None

    async def create_configmap(self, namespace: str, body: Obj) -> Obj:
        """Create; raises Conflict when a ConfigMap of that name exists already."""
        name = body.get("metadata", {}).get("name", "")
        return await self._call(
            f"create configmap {namespace}/{name}",
            self.core.create_namespaced_config_map,
            namespace,
            body,
        )

    async def replace_configmap(self, namespace: str, name: str, body: Obj) -> Obj:
        """Replace; body.metadata.resourceVersion guards against a concurrent writer."""
        return await self._call(
            f"replace configmap {namespace}/{name}",
            self.core.replace_namespaced_config_map,
            name,
            namespace,
            body,
        )

    def _lister(self, resource: Resource) -> Callable[..., Awaitable[Any]]:
        if resource == "pods":
            return self.core.list_pod_for_all_namespaces
        if resource == "resourcequotas":
            return self.core.list_resource_quota_for_all_namespaces
        return self.core.list_node

    async def list_pages(
        self,
        resource: Resource,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncGenerator[tuple[list[Obj], str], None]:
        """One consistent list, LIST_PAGE objects at a time: (items, the list's resourceVersion).

        Every page comes from the same snapshot, whose resourceVersion is the one to watch from.
        Raises Gone when the server no longer holds it (a continue token expires after some
        minutes); the caller must list again from the start.
        """
        token: str | None = None
        while True:
            page = await self._call(
                f"list {resource}",
                self._lister(resource),
                request_timeout=self.list_timeout,
                limit=LIST_PAGE,
                _continue=token,
                label_selector=label_selector,
                field_selector=field_selector,
            )
            metadata = page.get("metadata") or {}
            token = metadata.get("continue") or None
            yield page.get("items") or [], str(metadata.get("resourceVersion", ""))
            if token is None:
                return

    async def list_objects(self, resource: Resource) -> tuple[list[Obj], str]:
        """A consistent full list held in memory: (items, the resourceVersion to watch from)."""
        pages = [page async for page in self.list_pages(resource)]
        return [obj for items, _ in pages for obj in items], pages[-1][1]

    async def watch_objects(
        self,
        resource: Resource,
        resource_version: str,
        *,
        timeout_seconds: int,
        inactivity: float,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncGenerator[Obj, None]:
        """Raw watch events as dicts, until the server ends the watch.

        Raises Gone when the server refuses `resource_version` at connect,
        Unavailable on network trouble or when nothing, not even a bookmark,
        arrived for `inactivity` seconds.
        """
        what = f"watch {resource} from {resource_version}"
        timeout = aiohttp.ClientTimeout(
            # The server closes the watch after timeout_seconds; the margin
            # lets it do so cleanly before the client gives up.
            total=timeout_seconds + 30,
            sock_connect=self.timeout,
            sock_read=inactivity,
        )
        try:
            resp: aiohttp.ClientResponse = await self._lister(resource)(
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                label_selector=label_selector,
                field_selector=field_selector,
                _preload_content=False,
                _request_timeout=timeout,
            )
        except (aiohttp.ClientError, TimeoutError) as e:
            raise Unavailable(f"{what}: {type(e).__name__}: {e}") from e
        async with resp:
            if resp.status >= 300:
                try:
                    body = await resp.read()
                except (aiohttp.ClientError, TimeoutError):
                    body = b""
                raise from_response(resp.status, body, resp.headers, what)
            # The raw line stays inside _next_event: a generator suspended at `yield` would
            # otherwise hold it until the next event arrives, minutes on a quiet watch.
            while (event := await _next_event(resp, what)) is not None:
                yield event

    # --- the webhook's certificate (certs.bootstrap) ----------------------------------------

    async def get_secret(self, namespace: str, name: str) -> Obj | None:
        try:
            return await self._call(
                f"get secret {namespace}/{name}", self.core.read_namespaced_secret, name, namespace
            )
        except NotFound:
            return None

    async def create_secret(self, namespace: str, body: Obj) -> Obj:
        """Raises Conflict when a Secret of that name already exists."""
        name = body.get("metadata", {}).get("name", "")
        return await self._call(
            f"create secret {namespace}/{name}",
            self.core.create_namespaced_secret,
            namespace,
            body,
        )

    async def update_secret(self, namespace: str, name: str, body: Obj) -> Obj:
        """PUT the whole Secret; with metadata.resourceVersion set, raises Conflict if it changed."""
        return await self._call(
            f"update secret {namespace}/{name}",
            self.core.replace_namespaced_secret,
            name,
            namespace,
            body,
        )

    async def get_mutating_webhook_configuration(self, name: str) -> Obj | None:
        try:
            return await self._call(
                f"get mutatingwebhookconfiguration {name}",
                AdmissionregistrationV1Api(self.api).read_mutating_webhook_configuration,
                name,
            )
        except NotFound:
            return None

    async def patch_mutating_webhook_configuration(self, name: str, operations: list[Obj]) -> Obj:
        """Apply an RFC 6902 JSON patch; a failed `test` operation fails the whole patch."""
        return await self._call(
            f"patch mutatingwebhookconfiguration {name}",
            AdmissionregistrationV1Api(self.api).patch_mutating_webhook_configuration,
            name,
            operations,
            _content_type=JSON_PATCH,
        )


async def _next_event(resp: aiohttp.ClientResponse, what: str) -> Obj | None:
    """The next watch event, decoded; None when the server ended the watch."""
    line = b""
    while not line.strip():
        try:
            line = await resp.content.readline(max_line_length=MAX_WATCH_LINE)
        except (aiohttp.ClientError, TimeoutError) as e:
            raise Unavailable(f"{what}: {type(e).__name__}: {e}") from e
        if not line:
            return None
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise Unavailable(f"{what}: malformed event: {e}") from e
    if not isinstance(event, dict):
        raise Unavailable(f"{what}: an event is not a JSON object")
    return event
