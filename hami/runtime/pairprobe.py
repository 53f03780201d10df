"""/healthz/pair: this process and the kube-scheduler beside it, as one liveness answer.

kube-scheduler holds the leader Lease, and only its holder's extender gets filter and bind.
A `hami serve` that hangs while its kube-scheduler keeps renewing the Lease would stall every
GPU pod, and no other replica could take over. The chart therefore makes this endpoint
kube-scheduler's liveness probe: it answers only while this process's event loop runs (it
answers at all) and kube-scheduler's own /healthz says ok. When either stops, the kubelet
restarts kube-scheduler, which gives the Lease up on the way out, and the other replica's
kube-scheduler takes it at its next retry.
"""

import ssl
from collections.abc import Callable
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from hami.runtime.listeners import is_loopback


def check_url(url: str) -> None:
    """Raise ValueError unless `url` names a loopback /healthz (empty: no peer to check)."""
    if not url:
        return
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not is_loopback(parts.hostname or ""):
        raise ValueError(
            f"{url!r} is not an http(s) URL on a loopback address: the kube-scheduler to check "
            "runs in this pod"
        )


def pair_route(
    url: str, hopeless: Callable[[], str | None] = lambda: None, timeout: float = 2.0
) -> web.RouteDef:
    """`hopeless` says why this process gives up (hami.runtime.sight): then the kube-scheduler
    beside it is restarted too, and gives the Lease up at once."""
    # kube-scheduler serves its self-signed certificate on loopback: nothing to verify.
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE

    async def pair(_: web.Request) -> web.Response:
        why = hopeless()
        if why is not None:
            return web.Response(status=503, text=why)
        if not url:
            return web.Response(text="ok")
        try:
            async with (
                aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=timeout), trust_env=False
                ) as session,
                session.get(url, ssl=insecure) as resp,
            ):
                body = (await resp.text())[:200]
        except (aiohttp.ClientError, TimeoutError) as e:
            return web.Response(
                status=503, text=f"kube-scheduler at {url} does not answer: {type(e).__name__}"
            )
        if resp.status != 200:
            return web.Response(
                status=503, text=f"kube-scheduler at {url} answered {resp.status}: {body}"
            )
        return web.Response(text="ok")

    return web.get("/healthz/pair", pair)
