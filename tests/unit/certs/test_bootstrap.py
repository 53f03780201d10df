"""certs.bootstrap: the process's own CA and serving pair, in a Secret, rotated on a fake clock.

The API is the shared in-memory fake (tests/fakes/kubeapi.py) with the real API server's
concurrency rules (create of an existing name and update with a stale resourceVersion are 409s; a
JSON patch whose `test` fails changes nothing). tests/e2e/test_helm.py runs the same code against a real kube-apiserver.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import datetime as dt
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from hami.certs.bootstrap import BootstrapConfig, CertBootstrap, service_hosts
from hami.certs.material import MARKER, BootstrapError
from hami.certs.renewal import Lifetimes
from hami.certs.tls import ReloadingServerContext
from hami.kube.errors import KubeError, Unavailable
from hami.runtime.config import ConfigError
from hami.runtime.settingsload import load_settings
from tests.fakes.kubeapi import FakeKube, Fault

Obj = dict[str, Any]

NS = "hami-system"
SECRET = "hami-py-scheduler-tls"
WEBHOOKS = "hami-py-webhook"
HOSTS = service_hosts("hami-py-scheduler", NS)
T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


class CertAPI(FakeKube):
    """The shared fake API server, read as the bootstrap's Secret and webhook configuration."""

    @property
    def writes(self) -> list[str]:
        """create or update, for each write of the Secret that landed."""
        kinds = {"create_secret": "create", "update_secret": "update"}
        return [kinds[m] for m, _, _ in self.landed if m in kinds]

    @property
    def patches(self) -> list[list[Obj]]:
        return [ops for m, _, ops in self.landed if m == "patch_mutating_webhook_configuration"]

    def secret(self) -> Obj:
        found = self.get("secrets", SECRET, NS)
        assert found is not None
        return found

    def add_configuration(self, *names: str) -> None:
        self.add(
            "mutatingwebhookconfigurations",
            {
                "metadata": {"name": WEBHOOKS},
                "webhooks": [
                    {"name": n, "clientConfig": {"url": "https://x/webhook"}} for n in names
                ],
            },
        )

    def ca_bundles(self) -> list[bytes | None]:
        config = self.get("mutatingwebhookconfigurations", WEBHOOKS)
        assert config is not None
        return [
            base64.b64decode(w["clientConfig"]["caBundle"])
            if "caBundle" in w["clientConfig"]
            else None
            for w in config["webhooks"]
        ]

    def secret_data(self) -> dict[str, bytes]:
        return {k: base64.b64decode(v) for k, v in self.secret()["data"].items()}


class Clock:
    def __init__(self, now: dt.datetime = T0) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, by: dt.timedelta) -> None:
        self.now += by


def bootstrap(
    api: CertAPI,
    folder: Path,
    clock: Callable[[], dt.datetime],
    hosts: tuple[str, ...] = HOSTS,
    webhook_configuration: str = WEBHOOKS,
) -> CertBootstrap:
    return CertBootstrap(
        api,
        BootstrapConfig(NS, SECRET, folder, hosts, webhook_configuration, Lifetimes()),
        now=clock,
        resync=0.05,
        retry=(0.01, 0.05),
    )


def certificates(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem)


def served_cert_is_trusted(folder: Path, bundle: bytes) -> bool:
    """What a client holding `bundle` concludes about the certificate in `folder`."""
    leaf = x509.load_pem_x509_certificate((folder / "tls.crt").read_bytes())
    for ca in certificates(bundle):
        try:
            leaf.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return True
    return False


def sans(pem: bytes) -> set[str]:
    ext = x509.load_pem_x509_certificate(pem).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    ips = {str(ip) for ip in ext.value.get_values_for_type(x509.IPAddress)}
    return set(ext.value.get_values_for_type(x509.DNSName)) | ips


# --- first start, restart ------------------------------------------------------------------------


async def test_first_start_creates_the_secret_files_and_every_ca_bundle(tmp_path: Path) -> None:
    api = CertAPI()
    api.add_configuration("vgpu.hami.io", "second.hami.io")
    certs = bootstrap(api, tmp_path / "tls", Clock())

    await certs.start()

    secret = api.secret()
    assert secret["metadata"]["annotations"][MARKER] == "v1"
    assert secret["type"] == "Opaque"
    data = api.secret_data()
    assert set(data) == {"ca.crt", "ca.key", "tls.crt", "tls.key", "ca-bundle.crt"}
    assert (tmp_path / "tls" / "tls.crt").read_bytes() == data["tls.crt"]
    assert (tmp_path / "tls" / "tls.key").read_bytes() == data["tls.key"]
    assert (tmp_path / "tls" / "ca.crt").read_bytes() == data["ca.crt"] == data["ca-bundle.crt"]
    assert (tmp_path / "tls" / "tls.key").stat().st_mode & 0o777 == 0o600
    assert api.ca_bundles() == [data["ca.crt"], data["ca.crt"]]
    assert certs.published
    assert sans(data["tls.crt"]) == {
        "hami-py-scheduler",
        "hami-py-scheduler.hami-system",
        "hami-py-scheduler.hami-system.svc",
        "127.0.0.1",
    }
    leaf = x509.load_pem_x509_certificate(data["tls.crt"])
    assert leaf.not_valid_after_utc - leaf.not_valid_before_utc == dt.timedelta(days=90, minutes=5)
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    assert ca.not_valid_after_utc - T0 == dt.timedelta(days=3650)
    # The HTTPS server loads what was written, and a client trusting caBundle accepts it.
    ReloadingServerContext(certs.cert_file, certs.key_file)
    client = ssl.create_default_context(cadata=data["ca.crt"].decode())
    assert client.cert_store_stats()["x509_ca"] == 1
    assert served_cert_is_trusted(tmp_path / "tls", api.ca_bundles()[0] or b"")


async def test_a_restart_reuses_the_secret_and_writes_nothing(tmp_path: Path) -> None:
    api = CertAPI()
    api.add_configuration("vgpu.hami.io")
    clock = Clock()
    await bootstrap(api, tmp_path / "a", clock).start()
    before = api.secret_data()
    clock.advance(30 * DAY)

    await bootstrap(api, tmp_path / "b", clock).start()

    assert api.writes == ["create"]
    assert len(api.patches) == 1
    assert api.secret_data() == before
    assert (tmp_path / "b" / "tls.crt").read_bytes() == before["tls.crt"]


async def test_replicas_starting_together_end_up_with_one_pair(tmp_path: Path) -> None:
    api = CertAPI()
    api.add_configuration("vgpu.hami.io")
    clock = Clock()
    replicas = [bootstrap(api, tmp_path / f"r{i}", clock) for i in range(3)]

    await asyncio.gather(*(r.start() for r in replicas))

    assert api.writes == ["create"], "the losers of the create race must adopt the winner's pair"
    served = {(tmp_path / f"r{i}" / "tls.crt").read_bytes() for i in range(3)}
    assert served == {api.secret_data()["tls.crt"]}


# --- rotation --------------------------------------------------------------------------------------


async def test_the_serving_cert_is_renewed_at_two_thirds_of_its_life(tmp_path: Path) -> None:
    api = CertAPI()
    api.add_configuration("vgpu.hami.io")
    clock = Clock()
    certs = bootstrap(api, tmp_path, clock)
    await certs.start()
    first = api.secret_data()

    clock.advance(59 * DAY)  # 2/3 of 90 days (+5 minutes of backdating) is not reached yet
    await certs.reconcile()
    assert api.secret_data() == first

    clock.advance(1 * DAY)
    await certs.reconcile()
    renewed = api.secret_data()
    assert renewed["tls.crt"] != first["tls.crt"]
    assert renewed["ca.crt"] == first["ca.crt"], "renewing the serving cert keeps the CA"
    assert (tmp_path / "tls.crt").read_bytes() == renewed["tls.crt"]
    assert len(api.patches) == 1, "caBundle did not change, so it is not patched again"
    assert served_cert_is_trusted(tmp_path, api.ca_bundles()[0] or b"")


async def test_the_ca_rotates_with_an_overlapping_ca_bundle(tmp_path: Path) -> None:
    """At every step, the certificate being served is trusted by the caBundle already published."""
    api = CertAPI()
    api.add_configuration("vgpu.hami.io")
    clock = Clock()
    certs = bootstrap(api, tmp_path, clock)
    await certs.start()
    old_ca = api.secret_data()["ca.crt"]

    async def step(by: dt.timedelta) -> dict[str, bytes]:
        published_before = api.ca_bundles()[0] or b""
        clock.advance(by)
        await certs.reconcile()
        # A serving cert from a CA that was not in the bundle published *before* this round
        # would be refused by the API server until its informer caught up.
        assert served_cert_is_trusted(tmp_path, published_before)
        assert served_cert_is_trusted(tmp_path, api.ca_bundles()[0] or b"")
        return api.secret_data()

    # Keep the serving cert fresh on the way, as the resync loop would.
    for _ in range(40):
        await step(60 * DAY)
    assert api.secret_data()["ca.crt"] == old_ca, "2400 days is before 2/3 of the CA's 3650"

    data = await step(35 * DAY)  # day 2435: past 2/3, the successor is made and published
    successor = data["next-ca.crt"]
    assert data["ca.crt"] == old_ca
    assert certificates(api.ca_bundles()[0] or b"") == certificates(old_ca + successor)

    data = await step(dt.timedelta(minutes=30))
    assert data["ca.crt"] == old_ca, "the successor is not used before the overlap has passed"

    data = await step(dt.timedelta(minutes=31))
    assert data["ca.crt"] == successor
    assert "next-ca.crt" not in data
    leaf = x509.load_pem_x509_certificate(data["tls.crt"])
    leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(successor))
    # Other replicas may still serve a certificate of the old CA for a while: keep trusting it.
    assert certificates(api.ca_bundles()[0] or b"") == certificates(successor + old_ca)

    for _ in range(25):  # past the old CA's end (day 3650)
        data = await step(60 * DAY)
    assert certificates(api.ca_bundles()[0] or b"") == certificates(successor)
    assert data["ca.crt"] == successor


async def test_an_expired_ca_is_replaced_outright(tmp_path: Path) -> None:
    api = CertAPI()
    clock = Clock()
    certs = bootstrap(api, tmp_path, clock, webhook_configuration="")
    await certs.start()
    old = api.secret_data()
    clock.advance(3651 * DAY)  # the process was off for ten years

    await certs.reconcile()

    assert api.secret_data()["ca.crt"] != old["ca.crt"]
    assert api.secret_data()["ca-bundle.crt"] == api.secret_data()["ca.crt"]
    assert certs.published, "without a webhook configuration to manage there is nothing to publish"


async def test_new_service_names_get_a_certificate_covering_old_and_new(tmp_path: Path) -> None:
    api = CertAPI()
    clock = Clock()
    await bootstrap(api, tmp_path / "old", clock).start()
    renamed = service_hosts("renamed", NS)

    await bootstrap(api, tmp_path / "new", clock, hosts=renamed).start()

    # Replicas of both versions run side by side during a rolling upgrade; neither reissues.
    assert sans(api.secret_data()["tls.crt"]) == set(HOSTS) | set(renamed)
    await bootstrap(api, tmp_path / "old", clock).start()
    assert api.writes == ["create", "update"]


# --- repairs and refusals --------------------------------------------------------------------------


async def test_a_reset_ca_bundle_is_set_again(tmp_path: Path) -> None:
    api = CertAPI()
    api.add_configuration("vgpu.hami.io", "other.hami.io")
    certs = bootstrap(api, tmp_path, Clock())
    await certs.start()
    # `helm upgrade` with a new webhook list, or a person, drops one caBundle.
    api.edit(
        "mutatingwebhookconfigurations",
        WEBHOOKS,
        lambda c: c["webhooks"][1]["clientConfig"].pop("caBundle"),
    )

    await certs.reconcile()

    ca = api.secret_data()["ca.crt"]
    assert api.ca_bundles() == [ca, ca]
    assert [op["path"] for op in api.patches[-1]] == [
        "/webhooks/1/name",
        "/webhooks/1/clientConfig/caBundle",
    ], "only the webhook that lacked it is patched, pinned by name"


async def test_a_missing_webhook_configuration_is_retried_until_it_exists(tmp_path: Path) -> None:
    api = CertAPI()
    certs = bootstrap(api, tmp_path, Clock())
    await certs.start()  # Helm creates the configuration after the Deployment
    assert certs.cert_file.is_file()
    assert not certs.published

    stop = asyncio.Event()
    task = asyncio.create_task(certs.run(stop))
    await asyncio.sleep(0.05)
    api.add_configuration("vgpu.hami.io")
    for _ in range(100):
        if certs.published:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 1)
    assert api.ca_bundles() == [api.secret_data()["ca.crt"]]


async def test_a_secret_written_by_someone_else_is_left_alone(tmp_path: Path) -> None:
    api = CertAPI()
    foreign = {
        "metadata": {"name": SECRET, "namespace": NS, "resourceVersion": "7"},
        "data": {"tls.crt": base64.b64encode(b"theirs").decode()},
    }
    api.add("secrets", copy.deepcopy(foreign))

    with pytest.raises(BootstrapError, match=f"lacks the {MARKER} annotation"):
        await bootstrap(api, tmp_path, Clock()).start()
    assert api.writes == [] and api.secret_data() == {"tls.crt": b"theirs"}


async def test_a_damaged_secret_of_ours_is_replaced(tmp_path: Path) -> None:
    api = CertAPI()
    api.add(
        "secrets",
        {
            "metadata": {
                "name": SECRET,
                "namespace": NS,
                "resourceVersion": "7",
                "labels": {"team": "gpu"},
                "annotations": {MARKER: "v1"},
            },
            "data": {"ca.crt": base64.b64encode(b"garbage").decode()},
        },
    )

    await bootstrap(api, tmp_path, Clock()).start()

    assert api.writes == ["update"]
    assert api.secret()["metadata"]["labels"] == {"team": "gpu"}
    assert ReloadingServerContext(tmp_path / "tls.crt", tmp_path / "tls.key")


async def test_transient_errors_are_retried_and_permanent_ones_stop_the_start(
    tmp_path: Path,
) -> None:
    api = CertAPI()
    api.fail(
        Fault("", error=Unavailable("connection refused")),
        Fault("", error=Unavailable("HTTP 503", status=503)),
    )
    await bootstrap(api, tmp_path / "a", Clock()).start()
    assert api.writes == ["create"]

    api = CertAPI()
    api.fail(Fault("", error=KubeError('secrets "x" is forbidden', status=403)))
    with pytest.raises(BootstrapError, match="forbidden"):
        await bootstrap(api, tmp_path / "b", Clock()).start()


async def test_a_failing_ca_bundle_patch_does_not_stop_the_start(tmp_path: Path) -> None:
    api = CertAPI()
    api.add_configuration("vgpu.hami.io")
    certs = bootstrap(api, tmp_path, Clock())
    forbidden = KubeError("forbidden", status=403)
    api.fail(Fault("patch_mutating_webhook_configuration", error=forbidden, times=100))
    await certs.start()
    assert certs.cert_file.is_file() and not certs.published

    api.heal()
    await certs.reconcile()
    assert certs.published


# --- settings ---------------------------------------------------------------------------------------


def settings_args(*argv: str) -> argparse.Namespace:
    from hami.cli import parser

    return parser().parse_args(["serve", *argv])


def test_bootstrap_mode_needs_no_certificate_files(tmp_path: Path) -> None:
    args = settings_args(
        "--cert-bootstrap-secret",
        SECRET,
        "--cert-dir",
        str(tmp_path / "absent"),
        "--service-name",
        "hami-py-scheduler",
        "--service-namespace",
        NS,
        "--webhook-configuration-name",
        WEBHOOKS,
    )
    settings = load_settings(args, env={})
    assert settings.cert_bootstrap_secret == SECRET
    assert settings.webhook_configuration_name == WEBHOOKS


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            [
                "--cert-dir",
                "/tls",
                "--service-name",
                "s",
                "--service-namespace",
                "n",
                "--tls-cert-file",
                "/tls/tls.crt",
            ],
            "drop --tls-cert-file",
        ),
        (["--service-name", "s", "--service-namespace", "n"], "needs --cert-dir"),
        (["--cert-dir", "/tls", "--service-namespace", "n"], "needs --service-name"),
        (["--cert-dir", "/tls", "--service-name", "s"], "needs --service-namespace"),
    ],
)
def test_bootstrap_settings_that_cannot_work_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(settings_args("--cert-bootstrap-secret", SECRET, *argv), env={})


def test_without_bootstrap_the_files_are_still_required() -> None:
    with pytest.raises(ConfigError, match="--tls-cert-file and --tls-key-file are required"):
        load_settings(settings_args(), env={})
