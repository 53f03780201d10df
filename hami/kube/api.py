"""The API server as the services see it: the calls they make, and nothing of how.

hami.kube.client.Kube is the one implementation that talks to a real API
server; tests/fakes/kubeapi.py is an in-memory one, so the bind, the node lock
and the other services can be run in the fast tier against the same
conflicts, lost answers and failures the real server produces. Every call
raises the errors of hami.kube.errors (NotFound, Conflict, Unavailable, ...)
and nothing else; a read of something absent answers None instead.
"""

from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Protocol

from hami.kube.calls import Fence, Obj
from hami.kube.listwatch import Resource


class KubeAPI(Protocol):
    # --- pods ---------------------------------------------------------------------------------

    async def get_pod(self, namespace: str, name: str) -> Obj | None: ...

    async def patch_pod_metadata(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        labels: Mapping[str, str | None],
    ) -> Obj:
        """One JSON merge patch; a None value removes the key. Returns the patched pod."""

    async def patch_pod_status(self, namespace: str, name: str, status: Obj) -> Obj:
        """Strategic merge patch of the status subresource (conditions merge by type)."""

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
        """POST the pod's Binding with its annotations; Conflict when the pod is bound already
        (to this node or another), `uid` names another pod or the pod is no longer at
        `resource_version` (when given). `fence`, called right before the write is sent,
        raises to keep it from being sent (as for every write below)."""

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        """POST an Eviction; Unavailable (429) while a PodDisruptionBudget forbids it."""

    async def list_pod_disruption_budgets(self) -> list[Obj]: ...

    async def ungate_pod(self, namespace: str, name: str, uid: str, gates: list[Obj]) -> Obj:
        """Set the pod's scheduling gates to `gates` (those it has, less some: kube-apiserver
        lets gates only be removed), if it is still the pod of that uid."""

    # --- DRA claims ---------------------------------------------------------------------------

    async def create_resource_claim(self, namespace: str, body: Obj) -> Obj:
        """Create a resource.k8s.io/v1 ResourceClaim; Conflict when one of that name exists."""

    async def get_resource_claim(self, namespace: str, name: str) -> Obj | None: ...

    async def delete_resource_claim(
        self, namespace: str, name: str, uid: str, resource_version: str
    ) -> None:
        """Delete the claim if it is still that object at that version (Conflict otherwise)."""

    # --- nodes and leases ---------------------------------------------------------------------

    async def get_node(self, name: str) -> Obj | None: ...

    async def patch_node_annotations(
        self,
        name: str,
        annotations: Mapping[str, str | None],
        resource_version: str,
        request_timeout: float | None = None,
        fence: Fence | None = None,
    ) -> Obj:
        """Merge-patch the node's annotations if it is still at `resource_version` (else
        Conflict); returns the patched Node."""

    async def get_lease(self, namespace: str, name: str) -> Obj | None: ...

    # --- events and ConfigMaps ----------------------------------------------------------------

    async def create_event(self, namespace: str, event: Obj) -> Obj: ...

    async def patch_event(self, namespace: str, name: str, patch: Obj) -> Obj: ...

    async def get_configmap(self, namespace: str, name: str) -> Obj | None: ...

    async def create_configmap(self, namespace: str, body: Obj) -> Obj:
        """Conflict when a ConfigMap of that name exists already."""

    async def replace_configmap(self, namespace: str, name: str, body: Obj) -> Obj:
        """Conflict when body.metadata.resourceVersion is not the stored one."""

    # --- lists and watches --------------------------------------------------------------------

    def list_pages(
        self,
        resource: Resource,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        namespace: str | None = None,
    ) -> AsyncGenerator[tuple[list[Obj], str], None]:
        """One consistent list, page by page: (items, the resourceVersion to watch from)."""

    async def list_objects(self, resource: Resource) -> tuple[list[Obj], str]: ...

    def watch_objects(
        self,
        resource: Resource,
        resource_version: str,
        *,
        timeout_seconds: int,
        inactivity: float,
        label_selector: str | None = None,
        field_selector: str | None = None,
        namespace: str | None = None,
        connected: Callable[[], None] | None = None,
    ) -> AsyncGenerator[Obj, None]:
        """Watch events ({type, object}) after `resource_version`; Gone when it is too old.
        `connected` is called once the server has accepted the watch."""
