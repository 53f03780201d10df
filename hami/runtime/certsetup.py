"""The serving pair of `hami serve`: the files given (--tls-cert-file, --tls-key-file) or,
with --cert-bootstrap-secret, a pair made or reused through the Secret and rotated by the
CertBootstrap this returns (hami.certs.bootstrap), which then owns it; and the TLS context
loaded from it."""

import ssl
from pathlib import Path

from hami.certs.bootstrap import BootstrapConfig, CertBootstrap, service_hosts
from hami.certs.material import BootstrapError
from hami.certs.tls import ReloadingServerContext
from hami.kube.client import Kube
from hami.runtime.config import DEV_PAIR_COMMAND, ConfigError, Settings


def serving_context(cert_file: str, key_file: str) -> ReloadingServerContext:
    """The webhook's TLS, loaded now: a bad pair is a setting to fix, not a crash later."""
    try:
        return ReloadingServerContext(cert_file, key_file)
    except (ssl.SSLError, ValueError, OSError) as e:
        why = getattr(e, "reason", None) or getattr(e, "strerror", None) or str(e)
        raise ConfigError(
            f"--tls-cert-file {cert_file} and --tls-key-file {key_file} are not a PEM "
            f"certificate and its key ({why}); for a development pair run: {DEV_PAIR_COMMAND}"
        ) from None


def pair(settings: Settings) -> tuple[str, str]:
    return settings.tls_cert_file, settings.tls_key_file


async def certificates(settings: Settings, kube: Kube) -> tuple[CertBootstrap | None, str, str]:
    """The serving pair's files; with --cert-bootstrap-secret, made (or reused) first."""
    if not settings.cert_bootstrap_secret:
        return None, *pair(settings)
    certs = CertBootstrap(
        kube,
        BootstrapConfig(
            namespace=settings.service_namespace,
            secret_name=settings.cert_bootstrap_secret,
            cert_dir=Path(settings.cert_dir),
            hosts=service_hosts(settings.service_name, settings.service_namespace),
            webhook_configuration=settings.webhook_configuration_name,
        ),
    )
    try:
        await certs.start()
    except BootstrapError as e:
        # main() reports an OSError as "cannot serve" and exits 2, which is what this is.
        raise OSError(f"certificate bootstrap: {e}") from e
    return certs, str(certs.cert_file), str(certs.key_file)
