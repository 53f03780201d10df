"""An API client from a kubeconfig or the in-cluster service account."""

import os
import ssl
from collections.abc import Callable

import yaml
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration

from hami.files import UnreadableFileError, read_text
from hami.kube.errors import BadKubeconfig
from hami.kube.session import use_own_session

USER_AGENT = "hami-scheduler/0.1 (python)"


async def connect(kubeconfig: str | None) -> ApiClient:
    """A client on its own Configuration, so nothing leaks through the library's global default.

    Order: the given kubeconfig file, then the in-cluster service account, then
    $KUBECONFIG or ~/.kube/config.
    """
    cfg = Configuration()
    source = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    in_cluster = not kubeconfig and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if not in_cluster:
        _check_kubeconfigs(source)
    try:
        if kubeconfig:
            await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            source = "in-cluster service account"
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            await config.load_kube_config(client_configuration=cfg)
    except Exception as e:
        # The library fails in many ways on a bad file (its own ConfigException, OSError, YAML
        # errors, TypeError on a file that is YAML but not a mapping): all mean the same here.
        why = " ".join(str(e).split()) or type(e).__name__
        raise BadKubeconfig(
            f"kubeconfig {source}: {why} (give a readable kubeconfig with --kubeconfig)"
        ) from e
    _check_tls_material(cfg, source)
    api = ApiClient(cfg)
    api.user_agent = USER_AGENT
    await use_own_session(api)
    return api


def _check_kubeconfigs(source: str) -> None:
    if os.pathsep not in source:
        _check_kubeconfig(source)
        return
    # A list to merge: the library reads each file there is, whole.
    for part in source.split(os.pathsep):
        if part and os.path.exists(os.path.expanduser(part)):
            _readable(part)


def _check_kubeconfig(path: str) -> None:
    """Say plainly what is wrong with a kubeconfig file; the library's own errors for a missing
    file or one that is not a mapping are about keys it did not find."""
    text = _readable(path)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise BadKubeconfig(f"kubeconfig {path} is not YAML: {' '.join(str(e).split())}") from None
    if not isinstance(doc, dict):
        raise BadKubeconfig(
            f"kubeconfig {path} is not a kubeconfig: expected a mapping with clusters, users and "
            "contexts"
        )


def _readable(path: str) -> str:
    try:
        return read_text(os.path.expanduser(path))
    except UnreadableFileError as e:
        raise BadKubeconfig(
            f"kubeconfig {e} (give a readable kubeconfig with --kubeconfig)"
        ) from None


def _check_tls_material(cfg: Configuration, source: str) -> None:
    """Load the CA and the client pair now, as the first request would: OpenSSL's own word for
    a bad one (`[SSL] PEM lib`) names neither the file nor the field."""
    context = ssl.create_default_context()
    checks: list[tuple[str, Callable[[], None]]] = []
    if cfg.ssl_ca_cert:
        checks.append(
            (
                "current cluster's certificate-authority-data (or certificate-authority)",
                lambda: context.load_verify_locations(cfg.ssl_ca_cert),
            )
        )
    if cfg.cert_file or cfg.key_file:
        checks.append(
            (
                "current user's client-certificate-data and client-key-data (or "
                "client-certificate and client-key)",
                lambda: context.load_cert_chain(cfg.cert_file or "", cfg.key_file),
            )
        )
    for field, load in checks:
        try:
            load()
        except (ssl.SSLError, OSError) as e:
            why = getattr(e, "reason", None) or e.strerror or type(e).__name__
            raise BadKubeconfig(
                f"kubeconfig {source}: the {field} cannot be loaded ({why}): they must be PEM, "
                "the key the certificate's; get a fresh kubeconfig from your cluster's tooling "
                "or give another with --kubeconfig"
            ) from None
