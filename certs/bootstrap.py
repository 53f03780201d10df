"""The webhook's certificates, made and rotated by the process itself: no generator Jobs.

kube-apiserver calls the webhook over HTTPS and trusts it through the ``caBundle`` of the
MutatingWebhookConfiguration. HAMi's chart fills both with kube-webhook-certgen Jobs that run at
install and never again. Here every replica runs :class:`CertBootstrap`, which keeps a private CA
and a serving pair in one Secret and, at start and then every ``resync`` seconds:

1. reads the Secret and decides what has to change (:func:`certs.renewal.plan`, pure): nothing
   most of the time; a new serving certificate once two thirds of its lifetime have passed, when
   its names no longer cover the Service, or when it was not signed by the current CA;
   everything when the Secret is missing or unreadable;
2. writes the result back with the resourceVersion it read: replicas race only through the API
   server, and the loser of a 409 reads again and adopts what the winner wrote;
3. writes ``tls.crt``, ``tls.key`` and ``ca.crt`` (the whole caBundle) into the cert folder, which
   :class:`certs.tls.ReloadingServerContext` reloads without a restart;
4. sets ``caBundle`` on every webhook of the configuration that lacks the current bundle, which
   also repairs a bundle that an upgrade or a person reset.

The CA lives ten years. Should it ever near its end (two thirds again), its successor is made
first and published next to it in ``caBundle``; only once that bundle has been out for
``ca_overlap`` are serving certificates issued by the successor, and the old CA stays in the
bundle until it expires, since other replicas may still serve its certificate for a while.

Kubernetes I/O goes through the small :class:`CertificateAPI` protocol; ``hami.kube.client.Kube``
implements it, unit tests use an in-memory fake, and the e2e tests run it against a real API
server.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hami.certs.material import (
    CA_CRT,
    TLS_CRT,
    TLS_KEY,
    BootstrapError,
    Material,
    from_secret,
    to_secret,
)
from hami.certs.renewal import Lifetimes, plan
from hami.certs.selfsigned import _write_atomic
from hami.kube.errors import Conflict, KubeError, Unavailable

__all__ = ["BootstrapConfig", "CertBootstrap", "CertificateAPI", "service_hosts"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

_UPDATE_ATTEMPTS = 5


class CertificateAPI(Protocol):
    """The API calls the bootstrap makes. Errors are :mod:`hami.kube.errors` (Conflict on 409)."""

    async def get_secret(self, namespace: str, name: str) -> Obj | None: ...

    async def create_secret(self, namespace: str, body: Obj) -> Obj: ...

    async def update_secret(self, namespace: str, name: str, body: Obj) -> Obj: ...

    async def get_mutating_webhook_configuration(self, name: str) -> Obj | None: ...

    async def patch_mutating_webhook_configuration(
        self, name: str, operations: list[Obj]
    ) -> Obj: ...


@dataclass(frozen=True)
class BootstrapConfig:
    namespace: str
    secret_name: str
    cert_dir: Path
    hosts: tuple[str, ...]
    # "" leaves caBundle alone (say, when something else publishes the CA).
    webhook_configuration: str = ""
    lifetimes: Lifetimes = field(default_factory=Lifetimes)


def service_hosts(service: str, namespace: str) -> tuple[str, ...]:
    """Names the serving certificate must carry: the Service's DNS forms and loopback.

    kube-apiserver calls ``<service>.<namespace>.svc``; the sidecar kube-scheduler calls
    127.0.0.1.
    """
    return (service, f"{service}.{namespace}", f"{service}.{namespace}.svc", "127.0.0.1")


class CertBootstrap:
    """Keeps the Secret, the cert folder and caBundle in step; see the module docstring."""

    def __init__(
        self,
        api: CertificateAPI,
        config: BootstrapConfig,
        *,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        resync: float = 60.0,
        retry: tuple[float, float] = (1.0, 30.0),
    ) -> None:
        self.api = api
        self.config = config
        self.now = now
        self.resync = resync
        self.retry = retry
        self.material: Material | None = None
        # Whether caBundle was current after the last round.
        self.published = False

    @property
    def cert_file(self) -> Path:
        return self.config.cert_dir / TLS_CRT

    @property
    def key_file(self) -> Path:
        return self.config.cert_dir / TLS_KEY

    @property
    def ca_file(self) -> Path:
        return self.config.cert_dir / CA_CRT

    async def start(self, within: float = 60.0) -> None:
        """Settle the Secret and the cert folder, retrying transient errors for ``within`` seconds.

        Then try caBundle once. Its failure does not stop the start: the webhook configuration
        may be created after this process (Helm creates it after the Deployment), and
        :meth:`run` keeps trying.
        """
        deadline = time.monotonic() + within
        delay = self.retry[0]
        while True:
            try:
                await self._settle()
                break
            except (Unavailable, Conflict) as e:
                if time.monotonic() + delay > deadline:
                    raise BootstrapError(
                        f"could not settle the certificate Secret within {within:g}s: {e}"
                    ) from e
                log.warning("certificate bootstrap will retry", extra={"error": str(e)})
            except KubeError as e:
                raise BootstrapError(f"certificate Secret: {e}") from e
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.retry[1])
        await self._try_publish()

    async def run(self, stop: asyncio.Event) -> None:
        """Reconcile every ``resync`` seconds, sooner while caBundle could not be set, until stop."""
        delay = self.resync if self.published else self.retry[0]
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            if stop.is_set():
                return
            await self.reconcile()
            if self.published:
                delay = self.resync
            else:
                delay = self.retry[0] if delay >= self.resync else min(delay * 2, self.retry[1])

    async def reconcile(self) -> None:
        """One round of :meth:`run`: Secret, files, caBundle. A failure is logged; the current
        pair stays served and the next round tries again."""
        try:
            await self._settle()
        except (KubeError, BootstrapError) as e:
            log.error(
                "certificate bootstrap failed; still serving the current pair",
                extra={"error": str(e)},
            )
            self.published = False
        else:
            await self._try_publish()

    async def _settle(self) -> None:
        cfg = self.config
        for _ in range(_UPDATE_ATTEMPTS):
            secret = await self.api.get_secret(cfg.namespace, cfg.secret_name)
            material, reasons = plan(from_secret(secret), cfg.hosts, self.now(), cfg.lifetimes)
            if not reasons:
                break
            body = to_secret(material, cfg.namespace, cfg.secret_name, secret)
            try:
                if secret is None:
                    await self.api.create_secret(cfg.namespace, body)
                else:
                    await self.api.update_secret(cfg.namespace, cfg.secret_name, body)
            except Conflict:
                # Another replica wrote first: read again and adopt its result.
                log.info("certificate Secret changed concurrently; reading it again")
                continue
            log.info(
                "certificate Secret updated",
                extra={
                    "secret": f"{cfg.namespace}/{cfg.secret_name}",
                    "reasons": reasons,
                    "not_after": material.serving.not_after.isoformat(),
                },
            )
            break
        else:
            raise Conflict(
                f"certificate Secret {cfg.namespace}/{cfg.secret_name} kept changing "
                f"during {_UPDATE_ATTEMPTS} attempts"
            )
        self._write_files(material)
        self.material = material

    async def _try_publish(self) -> None:
        try:
            await self._publish()
        except KubeError as e:
            log.warning("could not set caBundle; will retry", extra={"error": str(e)})
            self.published = False

    def _write_files(self, material: Material) -> None:
        folder = self.config.cert_dir
        folder.mkdir(parents=True, exist_ok=True)
        # The CA bundle first, then key before certificate: a reader polling tls.crt sees the
        # new pair complete (certs.tls also rejects a certificate whose key is not there yet).
        for path, data, mode in (
            (self.ca_file, material.ca_bundle, 0o644),
            (self.key_file, material.serving.key_pem, 0o600),
            (self.cert_file, material.serving.cert_pem, 0o644),
        ):
            try:
                if path.read_bytes() == data:
                    continue
            except OSError:
                pass
            _write_atomic(path, data, mode)

    async def _publish(self) -> None:
        """Set caBundle on every webhook of the configuration that lacks the current bundle."""
        self.published = False
        name = self.config.webhook_configuration
        if self.material is None:
            return
        if not name:
            self.published = True
            return
        configuration = await self.api.get_mutating_webhook_configuration(name)
        if configuration is None:
            log.warning(
                "MutatingWebhookConfiguration not found; will set its caBundle once it exists",
                extra={"webhook_configuration": name},
            )
            return
        wanted = base64.b64encode(self.material.ca_bundle).decode()
        operations: list[Obj] = []
        patched: list[str] = []
        for i, webhook in enumerate(configuration.get("webhooks") or []):
            if (webhook.get("clientConfig") or {}).get("caBundle") == wanted:
                continue
            # The test pins the index to the webhook read, in case the list changed meanwhile.
            operations.append(
                {"op": "test", "path": f"/webhooks/{i}/name", "value": webhook.get("name")}
            )
            operations.append(
                {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": wanted}
            )
            patched.append(str(webhook.get("name")))
        if operations:
            await self.api.patch_mutating_webhook_configuration(name, operations)
            log.info("caBundle set", extra={"webhook_configuration": name, "webhooks": patched})
        self.published = True
