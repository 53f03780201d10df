"""Typed, dict-based access to the API calls hami makes (see hami.kube.calls for how)."""

import logging
from collections.abc import Mapping

from kubernetes_asyncio.client import AppsV1Api

from hami.kube.calls import JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, Fence, Obj, Write
from hami.kube.certificates import CertificateCalls
from hami.kube.errors import NotFound
from hami.kube.limiter import Priority
from hami.kube.listwatch import ListWatch

log = logging.getLogger(__name__)


class Kube(ListWatch, CertificateCalls):
    """Pods, nodes, leases, events, ConfigMaps and PodDisruptionBudgets; lists, watches and the
    webhook certificate's calls come from the bases."""

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

    async def get_admission_policy_binding(self, name: str) -> Obj | None:
        """The ValidatingAdmissionPolicyBinding `name`; None when there is none."""
        try:
            return await self._call(
                f"get validatingadmissionpolicybinding {name}",
                self.admission.read_validating_admission_policy_binding,
                name,
            )
        except NotFound:
            return None

    async def get_claim_source(self, namespace: str, kind: str, name: str) -> Obj | None:
        """A ResourceClaim or ResourceClaimTemplate (`kind`) of resource.k8s.io/v1; None when
        there is none (or the API server serves no such version)."""
        read = (
            self.resource.read_namespaced_resource_claim_template
            if kind == "ResourceClaimTemplate"
            else self.resource.read_namespaced_resource_claim
        )
        try:
            return await self._call(f"get {kind.lower()} {namespace}/{name}", read, name, namespace)
        except NotFound:
            return None

    async def get_resource_claim(self, namespace: str, name: str) -> Obj | None:
        return await self.get_claim_source(namespace, "ResourceClaim", name)

    async def delete_resource_claim(
        self, namespace: str, name: str, uid: str, resource_version: str
    ) -> None:
        preconditions = {"uid": uid, "resourceVersion": resource_version}
        await self._call(
            f"delete resourceclaim {namespace}/{name}",
            self.resource.delete_namespaced_resource_claim,
            name,
            namespace,
            body={"preconditions": preconditions},
            write=Write("delete", "resourceclaims", Priority.BIND_STEP),
        )

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
        self,
        namespace: str,
        name: str,
        body: Obj | list[Obj],
        content_type: str,
        status: bool = False,
    ) -> Obj:
        return await self._call(
            f"patch pod {namespace}/{name}" + (" status" if status else ""),
            self.core.patch_namespaced_pod_status if status else self.core.patch_namespaced_pod,
            name,
            namespace,
            body,
            write=Write("patch", "pods/status" if status else "pods"),
            _content_type=content_type,
        )

    async def ungate_pod(self, namespace: str, name: str, uid: str, gates: list[Obj]) -> Obj:
        """A JSON patch tested on the pod's uid, so a pod recreated under the name is not
        touched."""
        patch = [
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "replace", "path": "/spec/schedulingGates", "value": gates}
            if gates
            else {"op": "remove", "path": "/spec/schedulingGates"},
        ]
        return await self._patch_pod(namespace, name, patch, JSON_PATCH)

    async def create_resource_claim(self, namespace: str, body: Obj) -> Obj:
        name = body.get("metadata", {}).get("name", "")
        return await self._call(
            f"create resourceclaim {namespace}/{name}",
            self.resource.create_namespaced_resource_claim,
            namespace,
            body,
            write=Write("create", "resourceclaims", Priority.BIND_STEP),
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
            write=Write("create", "pods/eviction"),
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
        self,
        name: str,
        annotations: Mapping[str, str | None],
        resource_version: str,
        request_timeout: float | None = None,
        fence: Fence | None = None,
    ) -> Obj:
        """Merge-patch node annotations only if the node is still at `resource_version`; returns
        the patched Node.

        Raises Conflict when someone else changed the node since it was read, and whatever
        `fence` raises when it is called right before sending.
        """
        return await self._call(
            f"patch node {name}",
            self.core.patch_node,
            name,
            {"metadata": {"annotations": dict(annotations), "resourceVersion": resource_version}},
            request_timeout=request_timeout,
            write=Write("patch", "nodes", Priority.BIND_STEP),
            fence=fence,
            _content_type=MERGE_PATCH,
        )

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
        """POST the pod's Binding, carrying the annotations and labels that go with it.

        kube-apiserver sets spec.nodeName and merges the Binding's annotations into the pod in
        one update, and only while the pod is unbound: the pod is bound with exactly these
        annotations or not at all. `uid` (when not empty) makes the server refuse a different
        pod that reuses the name. Labels are copied by API servers with the
        PodTopologyLabelsAdmission feature (beta, on by default, from 1.35); older ones drop
        them. `resource_version` (when not empty) is a precondition as `uid` is: the Binding
        lands only on the pod as it was at that version, so once the pod is seen unbound at a
        later one, that Binding can never land (hami.service.outcomes relies on it). Raises
        Conflict when the pod is already bound, to this node or another, or changed, and
        whatever `fence` raises when it is called right before sending.
        """
        metadata: Obj = {"name": name, "namespace": namespace, "annotations": dict(annotations)}
        if uid:
            metadata["uid"] = uid
        if resource_version:
            metadata["resourceVersion"] = resource_version
        if labels:
            metadata["labels"] = dict(labels)
        await self._call(
            f"bind pod {namespace}/{name} to node {node}",
            self.core.create_namespaced_pod_binding,
            name,
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": metadata,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            },
            request_timeout=request_timeout,
            write=Write("create", "pods/binding", Priority.BINDING),
            fence=fence,
        )

    async def create_event(self, namespace: str, event: Obj) -> Obj:
        return await self._call(
            f"create event in {namespace}",
            self.core.create_namespaced_event,
            namespace,
            event,
            write=Write("create", "events"),
        )

    async def patch_event(self, namespace: str, name: str, patch: Obj) -> Obj:
        return await self._call(
            f"patch event {namespace}/{name}",
            self.core.patch_namespaced_event,
            name,
            namespace,
            patch,
            write=Write("patch", "events"),
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
            write=Write("create", "configmaps", Priority.BIND_STEP),
        )

    async def replace_configmap(self, namespace: str, name: str, body: Obj) -> Obj:
        """Replace; body.metadata.resourceVersion guards against a concurrent writer."""
        return await self._call(
            f"replace configmap {namespace}/{name}",
            self.core.replace_namespaced_config_map,
            name,
            namespace,
            body,
            write=Write("update", "configmaps", Priority.BIND_STEP),
        )

    async def get_deployment(self, namespace: str, name: str) -> Obj | None:
        """`hami migrate check` reads HAMi's scheduler Deployment (its replicas)."""
        try:
            return await self._call(
                f"get deployment {namespace}/{name}",
                AppsV1Api(self.api).read_namespaced_deployment,
                name,
                namespace,
            )
        except NotFound:
            return None
