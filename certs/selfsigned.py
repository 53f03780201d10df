"""Throwaway X.509 material: a private CA and the serving and client certificates it signs.

Used for development clusters and tests, where the webhook and the scheduler extender need a
certificate that the kube-apiserver and kube-scheduler will verify, and by :mod:`hami.certs.bootstrap`,
which keeps such a CA and serving pair in a Secret and rotates them in production (the
alternative being cert-manager).

Every key is ECDSA P-256. Go's TLS stack matches a host only against subjectAltName entries (it
ignores the common name), so serving certificates always carry IP and DNS SANs of the right type.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "DevBundle",
    "KeyPair",
    "issue_ca",
    "issue_client",
    "issue_serving",
    "write_dev_bundle",
]

# Certificates start slightly in the past so that a peer whose clock runs a little behind ours
# does not reject them as "not yet valid".
_BACKDATE = dt.timedelta(minutes=5)
# X.501 upper bound for a commonName attribute; cryptography refuses longer values.
_MAX_CN = 64


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM (unencrypted PKCS#8) private key."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def not_after(self) -> dt.datetime:
        """End of validity, timezone-aware UTC."""
        return self.certificate.not_valid_after_utc

    def _private_key(self) -> ec.EllipticCurvePrivateKey:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TypeError(f"expected an ECDSA key, got {type(key).__name__}")
        return key


@dataclass(frozen=True)
class DevBundle:
    """Files written by :func:`write_dev_bundle`."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def issue_ca(common_name: str, days: int = 365, *, now: dt.datetime | None = None) -> KeyPair:
    """Create a self-signed CA that may sign leaf certificates only (pathLen 0).

    ``now`` (timezone-aware) is when validity starts, before the backdating; the clock by default.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = now or _now()
    builder = _builder(name, name, key, now, now + dt.timedelta(days=days), ca=True)
    return _pair(builder.sign(key, hashes.SHA256()), key)


def issue_serving(
    ca: KeyPair, hosts: Sequence[str], days: int = 90, *, now: dt.datetime | None = None
) -> KeyPair:
    """Issue a TLS server certificate for ``hosts`` (DNS names and/or IP literals)."""
    if not hosts:
        raise ValueError("a serving certificate needs at least one host")
    sans = [_san(host) for host in hosts]
    # RFC 5280 4.2.1.6: with an empty subject the SAN extension must be critical.
    subject = _subject(hosts[0]) if len(hosts[0]) <= _MAX_CN else x509.Name([])
    return _issue_leaf(
        ca,
        subject,
        ExtendedKeyUsageOID.SERVER_AUTH,
        days,
        x509.SubjectAlternativeName(sans),
        san_critical=not list(subject),
        now=now,
    )


def issue_client(
    ca: KeyPair, common_name: str, organizations: Sequence[str] = (), days: int = 365
) -> KeyPair:
    """Issue a TLS client certificate.

    The kube-apiserver maps the common name to the user name and each organization to a group,
    so ``issue_client(ca, "admin", ["system:masters"])`` is a cluster administrator.
    """
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    return _issue_leaf(ca, x509.Name(attributes), ExtendedKeyUsageOID.CLIENT_AUTH, days)


def write_dev_bundle(directory: Path, hosts: Sequence[str]) -> DevBundle:
    """Write a fresh CA plus a serving certificate for ``hosts`` into ``directory``.

    Files are ``ca.crt``, ``tls.crt`` and ``tls.key`` (mode 0600). Each is replaced atomically,
    so a process that hot-reloads ``tls.crt``/``tls.key`` never reads a truncated file. The CA key
    is not kept: rerunning this function issues a new CA, and every consumer of ``ca.crt`` must
    pick up the new file.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca = issue_ca("hami dev CA")
    serving = issue_serving(ca, hosts)
    bundle = DevBundle(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    _write_atomic(bundle.ca_file, ca.cert_pem, 0o644)
    # Key before certificate: a reader that polls the certificate sees the new pair complete.
    _write_atomic(bundle.key_file, serving.key_pem, 0o600)
    _write_atomic(bundle.cert_file, serving.cert_pem, 0o644)
    return bundle


def _issue_leaf(
    ca: KeyPair,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    days: int,
    san: x509.SubjectAlternativeName | None = None,
    *,
    san_critical: bool = False,
    now: dt.datetime | None = None,
) -> KeyPair:
    ca_cert = ca.certificate
    ca_key = ca._private_key()
    key = ec.generate_private_key(ec.SECP256R1())
    now = now or _now()
    # A leaf that outlives its issuer would fail verification anyway; say so in the certificate.
    not_after = min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc)
    builder = (
        _builder(subject, ca_cert.subject, key, now, not_after, ca=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if san is not None:
        builder = builder.add_extension(san, critical=san_critical)
    return _pair(builder.sign(ca_key, hashes.SHA256()), key)


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    now: dt.datetime,
    not_after: dt.datetime,
    *,
    ca: bool,
) -> x509.CertificateBuilder:
    """What every certificate here has; only a CA may sign (certificates and CRLs)."""
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _subject(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pair(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> KeyPair:
    return KeyPair(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
