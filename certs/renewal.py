"""Deciding, without I/O, what the certificate Secret should hold at a given time."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from hami.certs.material import Material, check_pair
from hami.certs.selfsigned import KeyPair, issue_ca, issue_serving

__all__ = ["Lifetimes", "plan"]

CA_NAME = "hami-py webhook CA"


@dataclass(frozen=True)
class Lifetimes:
    """How long certificates live and when they are replaced."""

    ca_days: int = 3650
    serving_days: int = 90
    # Replace a certificate once this fraction of its validity has passed.
    renew_at: float = 2 / 3
    # How long both CAs are in caBundle before serving certificates come from the new one.
    ca_overlap: dt.timedelta = dt.timedelta(hours=1)


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
        check_pair(ca)
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
        check_pair(serving)
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
