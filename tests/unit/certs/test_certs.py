"""certs.selfsigned issues what Go and Python TLS stacks accept; certs.tls rotates it live."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import os
import ssl
import stat
from pathlib import Path
from typing import TypeVar

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from pytest_aiohttp import AiohttpServer

from hami.certs.selfsigned import KeyPair, issue_ca, issue_client, issue_serving, write_dev_bundle
from hami.certs.tls import ReloadingServerContext

# --- certs.selfsigned --------------------------------------------------------------------------


_E = TypeVar("_E", bound=x509.ExtensionType)


def _ext(cert: x509.Certificate, kind: type[_E]) -> x509.Extension[_E]:
    return cert.extensions.get_extension_for_class(kind)


def _close_to(actual: dt.datetime, expected: dt.datetime) -> bool:
    return abs(actual - expected) < dt.timedelta(minutes=1)


def test_ca_is_a_self_signed_p256_ca_for_leaves_only() -> None:
    ca = issue_ca("test CA", days=10)
    cert = ca.certificate

    assert cert.subject == cert.issuer
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "test CA"
    cert.verify_directly_issued_by(cert)
    constraints = _ext(cert, x509.BasicConstraints)
    assert constraints.critical
    assert constraints.value.ca
    assert constraints.value.path_length == 0
    assert _ext(cert, x509.KeyUsage).value.key_cert_sign
    public_key = cert.public_key()
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    assert isinstance(public_key.curve, ec.SECP256R1)
    assert _close_to(ca.not_after, dt.datetime.now(dt.UTC) + dt.timedelta(days=10))


def test_serving_certificate_has_typed_sans_and_server_auth() -> None:
    ca = issue_ca("test CA")
    serving = issue_serving(ca, ["127.0.0.1", "localhost", "::1", "hami.kube-system.svc"])
    cert = serving.certificate

    cert.verify_directly_issued_by(ca.certificate)
    san = _ext(cert, x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "hami.kube-system.svc"]
    assert list(_ext(cert, x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not _ext(cert, x509.BasicConstraints).value.ca
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert _close_to(serving.not_after, dt.datetime.now(dt.UTC) + dt.timedelta(days=90))


def test_serving_certificate_never_outlives_its_ca() -> None:
    ca = issue_ca("short-lived CA", days=1)
    assert issue_serving(ca, ["localhost"], days=90).not_after == ca.not_after


def test_serving_certificate_needs_a_host() -> None:
    with pytest.raises(ValueError, match="at least one host"):
        issue_serving(issue_ca("test CA"), [])


def test_long_host_goes_to_a_critical_san_with_an_empty_subject() -> None:
    host = ".".join(["a" * 40] * 3)
    cert = issue_serving(issue_ca("test CA"), [host]).certificate

    assert list(cert.subject) == []
    san = _ext(cert, x509.SubjectAlternativeName)
    assert san.critical
    assert san.value.get_values_for_type(x509.DNSName) == [host]


def test_client_certificate_maps_to_user_and_groups() -> None:
    ca = issue_ca("test CA")
    cert = issue_client(ca, "admin", ["system:masters", "e2e"]).certificate

    cert.verify_directly_issued_by(ca.certificate)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "admin"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:masters",
        "e2e",
    ]
    assert list(_ext(cert, x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_dev_bundle_is_loadable_and_keeps_the_key_private(tmp_path: Path) -> None:
    bundle = write_dev_bundle(tmp_path / "tls", ["127.0.0.1"])

    assert stat.S_IMODE(bundle.key_file.stat().st_mode) == 0o600
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(bundle.cert_file, bundle.key_file)
    leaf = x509.load_pem_x509_certificate(bundle.cert_file.read_bytes())
    leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(bundle.ca_file.read_bytes()))
    assert [p.name for p in sorted(bundle.ca_file.parent.iterdir())] == [
        "ca.crt",
        "tls.crt",
        "tls.key",
    ]


# --- certs.tls ---------------------------------------------------------------------------------


class Served:
    """A real HTTPS aiohttp server on 127.0.0.1 whose certificate files the test rewrites."""

    def __init__(self, directory: Path, ca: KeyPair, url: str, tls: ReloadingServerContext):
        self.directory = directory
        self.ca = ca
        self.url = url
        self.tls = tls
        self.client_ssl = ssl.create_default_context(cadata=ca.cert_pem.decode())

    def install(self, pair: KeyPair) -> None:
        """Replace both files atomically, as cert-manager or a Secret volume update would."""
        _replace(self.tls.cert_file, pair.cert_pem)
        _replace(self.tls.key_file, pair.key_pem)

    async def handshake_serial(self) -> int:
        """Serial of the certificate presented in a brand-new, fully verified handshake."""
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(self.url + "/ws", ssl=self.client_ssl) as ws,
        ):
            return _peer_serial(ws)


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _peer_serial(ws: aiohttp.ClientWebSocketResponse) -> int:
    ssl_object = ws.get_extra_info("ssl_object")
    assert isinstance(ssl_object, ssl.SSLObject)
    der = ssl_object.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def _serial(pair: KeyPair) -> int:
    return pair.certificate.serial_number


async def _echo(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for msg in ws:
        await ws.send_str(msg.data)
    return ws


async def _hello(request: web.Request) -> web.Response:
    return web.Response(text="hello")


@pytest.fixture
async def served(tmp_path: Path, aiohttp_server: AiohttpServer) -> Served:
    ca = issue_ca("rotation CA")
    first = issue_serving(ca, ["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(first.cert_pem)
    (tmp_path / "tls.key").write_bytes(first.key_pem)
    tls = ReloadingServerContext(tmp_path / "tls.crt", tmp_path / "tls.key")
    app = web.Application()
    app.router.add_get("/", _hello)
    app.router.add_get("/ws", _echo)
    server = await aiohttp_server(app, ssl=tls.context)
    return Served(tmp_path, ca, str(server.make_url("")).rstrip("/"), tls)


async def test_rotation_affects_new_handshakes_only(served: Served) -> None:
    before = _serial_of_files(served)
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(served.url + "/ws", ssl=served.client_ssl) as old_conn,
    ):
        assert _peer_serial(old_conn) == before

        second = issue_serving(served.ca, ["127.0.0.1"], days=30)
        served.install(second)
        assert served.tls.not_after > second.not_after.timestamp()
        assert served.tls.maybe_reload()
        assert served.tls.not_after == second.not_after.timestamp()  # the expiry metric's
        assert not served.tls.maybe_reload(), "unchanged files must not reload again"

        assert await served.handshake_serial() == _serial(second)
        async with session.get(served.url + "/", ssl=served.client_ssl) as resp:
            assert await resp.text() == "hello"
        # The connection opened before the swap still works, on the certificate it negotiated.
        await old_conn.send_str("still here")
        assert (await old_conn.receive(timeout=5)).data == "still here"
        assert _peer_serial(old_conn) == before


async def test_half_written_pair_keeps_serving_the_old_certificate(served: Served) -> None:
    before = _serial_of_files(served)
    expiry = served.tls.not_after
    new = issue_serving(served.ca, ["127.0.0.1"], days=30)

    # Certificate renewed, key not yet: the pair does not match.
    _replace(served.tls.cert_file, new.cert_pem)
    assert not served.tls.maybe_reload()
    assert await served.handshake_serial() == before
    assert served.tls.not_after == expiry  # what is served, not what is on disk

    # Key file caught mid-write.
    served.tls.key_file.write_bytes(new.key_pem[: len(new.key_pem) // 2])
    assert not served.tls.maybe_reload()
    assert await served.handshake_serial() == before

    # Key file missing for a moment.
    served.tls.key_file.unlink()
    assert not served.tls.maybe_reload()
    assert await served.handshake_serial() == before

    _replace(served.tls.key_file, new.key_pem)
    assert served.tls.maybe_reload()
    assert await served.handshake_serial() == _serial(new)


async def test_watch_rotates_until_stopped(served: Served) -> None:
    stop = asyncio.Event()
    watcher = asyncio.create_task(served.tls.watch(0.05, stop))
    new = issue_serving(served.ca, ["127.0.0.1"])
    served.install(new)

    for _ in range(100):
        if await served.handshake_serial() == _serial(new):
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the watcher did not install the new certificate within 5 s")

    stop.set()
    await asyncio.wait_for(watcher, timeout=1)


def test_initial_pair_must_load(tmp_path: Path) -> None:
    ca = issue_ca("test CA")
    (tmp_path / "tls.crt").write_bytes(issue_serving(ca, ["localhost"]).cert_pem)
    (tmp_path / "tls.key").write_bytes(issue_serving(ca, ["localhost"]).key_pem)
    with pytest.raises(ssl.SSLError):
        ReloadingServerContext(tmp_path / "tls.crt", tmp_path / "tls.key")
    with pytest.raises(FileNotFoundError):
        ReloadingServerContext(tmp_path / "tls.crt", tmp_path / "missing.key")


def _serial_of_files(served: Served) -> int:
    return x509.load_pem_x509_certificate(served.tls.cert_file.read_bytes()).serial_number
