"""The API calls that keep the webhook's certificate: its Secret and the caBundle.

:class:`certs.bootstrap.CertBootstrap` makes them through its CertificateAPI protocol.
"""

from kubernetes_asyncio.client import AdmissionregistrationV1Api

from hami.kube.calls import JSON_PATCH, ApiCalls, Obj, Write
from hami.kube.errors import NotFound


class CertificateCalls(ApiCalls):
    """Secrets and MutatingWebhookConfigurations."""

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
            write=Write("create", "secrets"),
        )

    async def update_secret(self, namespace: str, name: str, body: Obj) -> Obj:
        """PUT the whole Secret; with metadata.resourceVersion set, raises Conflict if it changed."""
        return await self._call(
            f"update secret {namespace}/{name}",
            self.core.replace_namespaced_secret,
            name,
            namespace,
            body,
            write=Write("update", "secrets"),
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
            write=Write("patch", "mutatingwebhookconfigurations"),
            _content_type=JSON_PATCH,
        )
