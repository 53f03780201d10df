"""A fault-injecting proxy in front of kube-apiserver, on loopback, for e2e tests.

Run::

    python -m tests.e2e.faultproxy --port P --upstream https://127.0.0.1:A --ca ca.crt \\
        --client-cert c.crt --client-key c.key --cert s.crt --key s.key --rules rules.json

It terminates TLS for one client (`hami serve`, given a kubeconfig that points here) and
forwards every request to kube-apiserver as that client's own identity (the client certificate
it was started with), streaming watches through. Requests matching a rule in ``rules.json``
(re-read whenever the file changes) are tampered with:

* ``drop-response``: forward the request, let kube-apiserver act on it, then close the client's
  connection without an answer, as a network or a timed-out call loses it;
* ``delay-response``: forward it and hold the answer back ``seconds``;
* ``refuse``: answer ``status`` (429, 503, ...) without forwarding; a watch or other streamed
  answer already under way that the rule matches is cut when the rule appears (logged as
  ``fault: cut``), as a load balancer or a restarting API server cuts it.

A rule is ``{"method": "POST", "path": "<regex on the path>", "action": ..., "seconds": s,
"status": n, "times": n}``; ``times`` (default unlimited) counts the requests it may still act
on. Every act is logged as ``fault: <action> <method> <path>``, which tests count.

It decides nothing about scheduling: it only loses, delays or refuses what it is told to.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import signal
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

log = logging.getLogger("faultproxy")

READY_MARKER = "faultproxy ready"
# Hop-by-hop headers, and those aiohttp sets itself for the body it sends.
_SKIP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}


@dataclass
class Rule:
    method: str
    path: re.Pattern[str]
    action: str
    seconds: float = 0.0
    status: int = 503
    times: int | None = None

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        return method == self.method and bool(self.path.search(path))


class Rules:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._mtime = -1.0
        self._rules: list[Rule] = []

    def refuses(self, method: str, path: str) -> bool:
        """Whether a refuse rule matches, without using up its count."""
        self._reload()
        return any(r.action == "refuse" and r.matches(method, path) for r in self._rules)

    def take(self, method: str, path: str) -> Rule | None:
        """The first rule that acts on this request, its count used up by one."""
        self._reload()
        for rule in self._rules:
            if rule.matches(method, path):
                if rule.times is not None:
                    rule.times -= 1
                return rule
        return None

    def _reload(self) -> None:
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            self._rules, self._mtime = [], -1.0
            return
        if mtime == self._mtime:
            return
        self._mtime = mtime
        raw: list[dict[str, Any]] = json.loads(self.path.read_text() or "[]")
        self._rules = [
            Rule(
                method=r["method"],
                path=re.compile(r["path"]),
                action=r["action"],
                seconds=float(r.get("seconds", 0)),
                status=int(r.get("status", 503)),
                times=r.get("times"),
            )
            for r in raw
        ]
        log.info("rules loaded: %s", raw)


class Proxy:
    def __init__(self, upstream: str, rules: Rules, client_ssl: ssl.SSLContext) -> None:
        self.upstream = upstream.rstrip("/")
        self.rules = rules
        # Requests whose answer is being streamed, by id (a Request is not hashable).
        self.streams: dict[int, web.Request] = {}
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=client_ssl, limit=256),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,
            trust_env=False,
        )

    async def handle(self, request: web.Request) -> web.StreamResponse:
        rule = self.rules.take(request.method, request.path)
        if rule is not None and rule.action == "refuse":
            log.info("fault: refuse %s %s", request.method, request.path)
            status = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                      "message": "refused by the fault proxy", "code": rule.status}  # fmt: skip
            return web.json_response(status, status=rule.status)
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _SKIP}
        async with self.session.request(
            request.method, self.upstream + request.path_qs, data=body, headers=headers
        ) as upstream:
            if rule is not None and rule.action == "drop-response":
                await upstream.read()  # kube-apiserver has acted on it: only the answer is lost
                log.info("fault: drop-response %s %s", request.method, request.path)
                assert request.transport is not None
                request.transport.abort()
                raise asyncio.CancelledError
            if rule is not None and rule.action == "delay-response":
                payload = await upstream.read()
                log.info(
                    "fault: delay-response %s %s %.1fs", request.method, request.path, rule.seconds
                )
                await asyncio.sleep(rule.seconds)
                return web.Response(
                    status=upstream.status, body=payload, headers=_answer_headers(upstream)
                )
            response = web.StreamResponse(status=upstream.status, headers=_answer_headers(upstream))
            await response.prepare(request)
            self.streams[id(request)] = request
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            finally:
                self.streams.pop(id(request), None)
            await response.write_eof()
            return response

    async def cut(self) -> None:
        """Cut the streamed answers a refuse rule matches, whenever the rules say so."""
        while True:
            for key, request in list(self.streams.items()):
                if self.rules.refuses(request.method, request.path):
                    log.info("fault: cut %s %s", request.method, request.path)
                    self.streams.pop(key, None)
                    if request.transport is not None:
                        request.transport.abort()
            await asyncio.sleep(0.2)


def _answer_headers(upstream: aiohttp.ClientResponse) -> dict[str, str]:
    return {k: v for k, v in upstream.headers.items() if k.lower() not in _SKIP}


async def _serve(args: argparse.Namespace) -> None:
    client_ssl = ssl.create_default_context(cafile=args.ca)
    client_ssl.load_cert_chain(args.client_cert, args.client_key)
    server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ssl.load_cert_chain(args.cert, args.key)
    proxy = Proxy(args.upstream, Rules(Path(args.rules)), client_ssl)
    app = web.Application(client_max_size=16 * 2**20)
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port, ssl_context=server_ssl)
    await site.start()
    cutter = asyncio.create_task(proxy.cut())
    log.info(READY_MARKER)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    cutter.cancel()
    await runner.cleanup()
    await proxy.session.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream", required=True)
    p.add_argument("--ca", required=True, help="kube-apiserver's CA")
    p.add_argument("--client-cert", required=True, help="the identity requests are sent as")
    p.add_argument("--client-key", required=True)
    p.add_argument("--cert", required=True, help="this proxy's serving certificate")
    p.add_argument("--key", required=True)
    p.add_argument("--rules", required=True)
    args = p.parse_args(argv)
    if not args.upstream.startswith("https://127."):
        p.error("the upstream must be a kube-apiserver on loopback")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s.%(msecs)03d %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
    )  # fmt: skip
    asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
