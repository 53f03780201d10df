"""The HTTP session under the API client.

kubernetes_asyncio builds its aiohttp session with trust_env=True, which has
aiohttp look up proxy variables and ~/.netrc on every request, the netrc
through the thread pool: in a profile of `hami serve` under load that was
about 15 % of the CPU. The scheduler talks to one API server named in its
kubeconfig, so the session here reads nothing from the environment; a proxy
the kubeconfig names (proxy-url) still applies, because the library passes
configuration.proxy with every request.
"""

import ssl

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration

# Both watches hold a connection each for as long as they run, and kube-scheduler hands
# binds over in bursts (several API calls each). Past this many, a call waits for a warm
# connection, which costs less than the TLS handshake of yet another one.
POOL_SIZE = 64
# Watch events carrying large objects exceed aiohttp's default read buffer; the library
# sizes it for etcd's 1.5 MiB request limit and so does this.
READ_BUFSIZE = 2**21


def tls_context(cfg: Configuration) -> ssl.SSLContext:
    """The TLS settings kubernetes_asyncio derives from a Configuration, as it derives them."""
    context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file:
        context.load_cert_chain(cfg.cert_file, keyfile=cfg.key_file)
    if not cfg.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cfg.disable_strict_ssl_verification:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


async def use_own_session(api: ApiClient, pool_size: int = POOL_SIZE) -> None:
    """Swap the library's session for one that ignores the environment; close the old one."""
    rest = api.rest_client
    library_session: aiohttp.ClientSession = rest.pool_manager
    connector = aiohttp.TCPConnector(limit=pool_size, ssl=tls_context(api.configuration))
    rest.pool_manager = aiohttp.ClientSession(
        connector=connector, trust_env=False, read_bufsize=READ_BUFSIZE
    )
    await library_session.close()
