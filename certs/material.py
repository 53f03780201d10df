"""What the certificate Secret holds: the CA, the serving pair, the caBundle and a successor CA.

:func:`from_secret` and :func:`to_secret` convert between :class:`Material` and the Secret that
:class:`certs.bootstrap.CertBootstrap` keeps.
"""

from __future__ import annotations

import base64
import binascii
import logging
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from hami.certs.selfsigned import KeyPair

__all__ = [
    "CA_CRT",
    "MARKER",
    "TLS_CRT",
    "TLS_KEY",
    "BootstrapError",
    "Material",
    "check_pair",
    "from_secret",
    "to_secret",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# Set on every Secret the bootstrap writes. A Secret of the configured name without it belongs to
# someone else and is never overwritten.
MARKER = "hami.io/cert-bootstrap"
MARKER_VALUE = "v1"

# Keys of the Secret. ca.crt and tls.* follow the kubernetes.io/tls and cert-manager layout.
TLS_CRT = "tls.crt"
TLS_KEY = "tls.key"
CA_CRT = "ca.crt"
CA_KEY = "ca.key"
CA_BUNDLE = "ca-bundle.crt"
NEXT_CA_CRT = "next-ca.crt"
NEXT_CA_KEY = "next-ca.key"


class BootstrapError(RuntimeError):
    """The certificate cannot be managed as configured; the message says what to change."""


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

    Raises :class:`BootstrapError` for a Secret with data that the bootstrap did not write.
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
                check_pair(pair)
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


def check_pair(pair: KeyPair) -> None:
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
