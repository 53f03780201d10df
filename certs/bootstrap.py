"""The webhook's certificates, made and rotated by the process itself: no generator Jobs.

kube-apiserver calls the webhook over HTTPS and trusts it through the ``caBundle`` of the
MutatingWebhookConfiguration. HAMi's chart fills both with kube-webhook-certgen Jobs that run at
install and never again. Here every replica runs :class:`CertBootstrap`, which keeps a private CA
and a serving pair in one Secret and, at start and then every ``resync`` seconds:

1. reads the Secret and decides what has to change (:func:`plan`, pure): nothing most of the
   time; a new serving certificate once two thirds of its lifetime have passed, when its names
   no longer cover the Service, or when it was not signed by the current CA; everything when
   the Secret is missing or unreadable;
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
import binascii
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from certs.selfsigned import KeyPair, _write_atomic, issue_ca, issue_serving
from hami.kube.errors import Conflict, KubeError, Unavailable

__all__ = [
    "MARKER",
    "BootstrapConfig",
    "BootstrapError",
    "CertBootstrap",
    "CertificateAPI",
    "Lifetimes",
    "Material",
    "from_secret",
    "plan",
    "service_hosts",
    "to_secret",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# Set on every Secret this module writes. A Secret of the configured name without it belongs to
# someone else and is never overwritten.
MARKER = "hami.io/cert-bootstrap"
MARKER_VALUE = "v1"
CA_NAME = "hami-py webhook CA"

# Keys of the Secret. ca.crt and tls.* follow the kubernetes.io/tls and cert-manager layout.
TLS_CRT = "tls.crt"
TLS_KEY = "tls.key"
CA_CRT = "ca.crt"
CA_KEY = "ca.key"
CA_BUNDLE = "ca-bundle.crt"
NEXT_CA_CRT = "next-ca.crt"
NEXT_CA_KEY = "next-ca.key"

_UPDATE_ATTEMPTS = 5


class BootstrapError(RuntimeError):
    """The certificate cannot be managed as configured; the message says what to change."""


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
class Lifetimes:
    """How long certificates live and when they are replaced."""

    ca_days: int = 3650
    serving_days: int = 90
    # Replace a certificate once this fraction of its validity has passed.
    renew_at: float = 2 / 3
    # How long both CAs are in caBundle before serving certificates come from the new one.
    ca_overlap: dt.timedelta = dt.timedelta(hours=1)


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


# --- what the Secret holds -------------------------------------------------------------------


@dataclass(frozen=True)
class Material:
    """The CA, the serving pair it signed, what caBundle must trust and a successor CA, if any."""

    ca: KeyPair
    serving: KeyPair
    trusted: tuple[bytes, ...]  # PEM certificates for caBundle, the current CA first
    next_ca: KeyPair | None = None

    @property
    def ca_bundle(self) -> bytes:
        return b"".join(self.trusted)


def from_secret(secret: Obj | None) -> Material | None:
    """Material from a Secret written by :func:`to_secret`; None when absent or unusable.

    Raises :class:`BootstrapError` for a Secret with data that this module did not write.
    """
    if secret is None:
        return None
    metadata = secret.get("metadata") or {}
    data = secret.get("data") or {}
    name = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
    if (metadata.get("annotations") or {}).get(MARKER) != MARKER_VALUE and data:
        raise BootstrapError(
            f"Secret {name} exists and was not written by the certificate bootstrap (it lacks the "
            f"{MARKER} annotation); delete it or choose another --cert-bootstrap-secret"
        )
    try:
        raw = {k: base64.b64decode(v, validate=True) for k, v in data.items()}
        ca = KeyPair(raw[CA_CRT], raw[CA_KEY])
        serving = KeyPair(raw[TLS_CRT], raw[TLS_KEY])
        next_ca = KeyPair(raw[NEXT_CA_CRT], raw[NEXT_CA_KEY]) if NEXT_CA_CRT in raw else None
        trusted = tuple(_split_pem(raw.get(CA_BUNDLE, raw[CA_CRT])))
        for pair in (ca, next_ca):
            if pair is not None:
                _check_pair(pair)
    except (KeyError, ValueError, TypeError, binascii.Error) as e:
        log.warning(
            "certificate Secret is unusable; making new material",
            extra={"secret": name, "error": f"{type(e).__name__}: {e}"},
        )
        return None
    return Material(ca=ca, serving=serving, trusted=trusted, next_ca=next_ca)


def to_secret(material: Material, namespace: str, name: str, previous: Obj | None) -> Obj:
    """The Secret for ``material``: keeps labels, annotations and resourceVersion of ``previous``."""
    metadata: Obj = {"name": name, "namespace": namespace}
    old = (previous or {}).get("metadata") or {}
    for key in ("labels", "annotations", "resourceVersion", "ownerReferences"):
        if old.get(key):
            metadata[key] = old[key]
    metadata["annotations"] = {**(metadata.get("annotations") or {}), MARKER: MARKER_VALUE}
    data = {
        CA_CRT: material.ca.cert_pem,
        CA_KEY: material.ca.key_pem,
        TLS_CRT: material.serving.cert_pem,
        TLS_KEY: material.serving.key_pem,
        CA_BUNDLE: material.ca_bundle,
    }
    if material.next_ca is not None:
        data[NEXT_CA_CRT] = material.next_ca.cert_pem
        data[NEXT_CA_KEY] = material.next_ca.key_pem
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        # The type of a Secret cannot change; one made empty beforehand keeps its own.
        "type": (previous or {}).get("type") or "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


# --- deciding: pure ----------------------------------------------------------------------------


def plan(
    current: Material | None, hosts: Sequence[str], now: dt.datetime, life: Lifetimes
) -> tuple[Material, list[str]]:
    """The material that should be in the Secret at ``now``, and why it differs (empty: it doesn't).

    Issues keys and certificates where needed, otherwise returns ``current`` unchanged.
    """
    now = now.astimezone(dt.UTC).replace(microsecond=0)
    if current is None or _ca_problem(current.ca, now):
        why = "no usable certificate Secret" if current is None else _ca_problem(current.ca, now)
        ca = issue_ca(CA_NAME, life.ca_days, now=now)
        serving = issue_serving(ca, hosts, life.serving_days, now=now)
        return Material(ca, serving, (ca.cert_pem,)), [f"{why}: made a new CA and serving pair"]

    reasons: list[str] = []
    ca, next_ca = current.ca, current.next_ca
    if next_ca is not None and _ca_problem(next_ca, now):
        reasons.append(f"successor CA dropped ({_ca_problem(next_ca, now)})")
        next_ca = None
    if next_ca is None and _due(ca.certificate, life.renew_at, now):
        next_ca = issue_ca(CA_NAME, life.ca_days, now=now)
        reasons.append("the CA is due for renewal: made its successor and published both")
    elif next_ca is not None and now >= next_ca.certificate.not_valid_before_utc + life.ca_overlap:
        ca, next_ca = next_ca, None
        reasons.append("the successor CA has been published long enough: switched to it")

    serving = current.serving
    problem = _serving_problem(serving, ca, hosts, now, life.renew_at)
    if problem:
        names = list(dict.fromkeys([*hosts, *_sans(serving)])) if problem == "names" else hosts
        serving = issue_serving(ca, names, life.serving_days, now=now)
        reasons.append(f"new serving certificate: {_SERVING_WHY[problem]}")

    trusted = _trusted(ca, next_ca, current.trusted, now)
    if trusted != current.trusted and not reasons:
        reasons.append("dropped expired CAs from the bundle")
    return Material(ca, serving, trusted, next_ca), reasons


_SERVING_WHY = {
    "unreadable": "the old one could not be read",
    "issuer": "the old one was not signed by the current CA",
    "names": "the old one does not cover every Service name",
    "due": "the old one is past its renewal point",
}


def _due(cert: x509.Certificate, fraction: float, now: dt.datetime) -> bool:
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return now >= start + (end - start) * fraction


def _ca_problem(ca: KeyPair, now: dt.datetime) -> str:
    try:
        cert = ca.certificate
        _check_pair(ca)
    except (ValueError, TypeError) as e:
        return f"the CA cannot be read ({e})"
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return "the CA certificate has no basicConstraints"
    if not constraints.ca:
        return "the CA certificate is not a CA"
    if now >= cert.not_valid_after_utc:
        return "the CA has expired"
    return ""


def _serving_problem(
    serving: KeyPair, ca: KeyPair, hosts: Sequence[str], now: dt.datetime, fraction: float
) -> str:
    try:
        cert = serving.certificate
        _check_pair(serving)
    except (ValueError, TypeError):
        return "unreadable"
    try:
        cert.verify_directly_issued_by(ca.certificate)
    except (ValueError, TypeError, InvalidSignature):
        return "issuer"
    if not set(hosts) <= set(_sans(serving)):
        return "names"
    if _due(cert, fraction, now):
        return "due"
    return ""


def _sans(pair: KeyPair) -> list[str]:
    try:
        ext = pair.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except (ValueError, x509.ExtensionNotFound):
        return []
    names: list[str] = ext.value.get_values_for_type(x509.DNSName)
    ips = [str(ip) for ip in ext.value.get_values_for_type(x509.IPAddress)]
    return names + ips


def _trusted(
    ca: KeyPair, next_ca: KeyPair | None, before: Sequence[bytes], now: dt.datetime
) -> tuple[bytes, ...]:
    """Current CA, successor, then earlier CAs still valid (replicas may still serve their certs)."""
    out = [ca.cert_pem] + ([next_ca.cert_pem] if next_ca is not None else [])
    for pem in before:
        if pem in out:
            continue
        try:
            if x509.load_pem_x509_certificate(pem).not_valid_after_utc > now:
                out.append(pem)
        except ValueError:
            continue
    return tuple(out)


def _check_pair(pair: KeyPair) -> None:
    """Raises ValueError unless the private key belongs to the certificate."""
    key = serialization.load_pem_private_key(pair.key_pem, password=None)
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    mine = key.public_key().public_bytes(serialization.Encoding.PEM, spki)
    theirs = pair.certificate.public_key().public_bytes(serialization.Encoding.PEM, spki)
    if mine != theirs:
        raise ValueError("the private key does not match the certificate")


def _split_pem(data: bytes) -> list[bytes]:
    marker = b"-----END CERTIFICATE-----"
    parts = [p.strip() for p in data.split(marker) if p.strip()]
    certs = [p + b"\n" + marker + b"\n" for p in parts]
    for pem in certs:
        x509.load_pem_x509_certificate(pem)  # ValueError when one is damaged
    return certs


# --- doing: I/O ---------------------------------------------------------------------------------


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
            if self.published:
                delay = self.resync
            else:
                delay = self.retry[0] if delay >= self.resync else min(delay * 2, self.retry[1])

    async def reconcile(self) -> None:
        """One round: Secret, files, caBundle. Errors propagate (tests drive this directly)."""
        await self._settle()
        await self._publish()

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
