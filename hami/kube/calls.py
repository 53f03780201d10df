"""The one place that issues requests to the API server.

Every call goes through kubernetes_asyncio's generated methods with
`_preload_content=False` and parses the body with orjson: dicts are several
times cheaper than generated models, and raw responses sidestep the library's
V1Binding deserialisation bug. Every call carries a timeout because the
library's default is to wait forever.
"""

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import (
    AdmissionregistrationV1Api,
    ApiClient,
    CoordinationV1Api,
    CoreV1Api,
    PolicyV1Api,
    ResourceV1Api,
)

from hami.kube.errors import KubeError, Unavailable, from_response
from hami.kube.limiter import Priority, WriteLimiter

Obj = dict[str, Any]
# (verb, resource, outcome, seconds) of every write: the outcome is the HTTP status, or
# "unanswered" when none came (a timeout, a broken connection, a caller that gave up).
WriteObserver = Callable[[str, str, str, float], None]
# Raises when a write must no longer be sent (hami.kube.leader.Term.check).
Fence = Callable[[], None]


@dataclass(frozen=True, slots=True)
class Write:
    """What a write is, for the limiter and for counting writes by verb and resource."""

    verb: str  # create, patch, update, delete
    resource: str  # e.g. pods/binding, nodes, events
    priority: Priority = Priority.ROUTINE


MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class ApiCalls:
    """The API groups hami uses and the request method every call of :class:`Kube` goes through."""

    def __init__(
        self,
        api: ApiClient,
        *,
        timeout: float = 10.0,
        list_timeout: float = 60.0,
        writes: WriteLimiter | None = None,
        on_write: WriteObserver | None = None,
    ) -> None:
        self.api = api
        self.core = CoreV1Api(api)
        self.coordination = CoordinationV1Api(api)
        self.policy = PolicyV1Api(api)
        self.admission = AdmissionregistrationV1Api(api)
        self.resource = ResourceV1Api(api)
        self.timeout = timeout
        # A page of a list is read from etcd and can be hundreds of objects: far slower than
        # a point read on a busy server.
        self.list_timeout = list_timeout
        # Writes wait here for a slot; reads (cheap, and what tells a bind the truth) never do.
        self.writes = writes or WriteLimiter(64)
        self.on_write = on_write

    @property
    def server(self) -> str:
        """The API server's address, as the kubeconfig (or the service account) gives it."""
        return str(self.api.configuration.host)

    async def close(self) -> None:
        await self.api.close()

    async def _call(
        self,
        what: str,
        method: Callable[..., Awaitable[Any]],
        *args: Any,
        request_timeout: float | None = None,
        write: Write | None = None,
        fence: Fence | None = None,
        **kwargs: Any,
    ) -> Obj:
        """`fence` is called the moment a write may be sent, after any wait for a slot: it
        raises to keep a write decided under a leadership term that has since ended from
        reaching the API server."""
        if write is None:
            return await self._request(what, method, args, request_timeout, kwargs)
        async with self.writes.slot(write.priority):
            if fence is not None:
                fence()
            started = time.monotonic()
            outcome = "unanswered"
            try:
                result = await self._request(what, method, args, request_timeout, kwargs)
                outcome = "200"
                return result
            except KubeError as e:
                outcome = str(e.status or outcome)
                raise
            finally:
                if self.on_write is not None:
                    self.on_write(write.verb, write.resource, outcome, time.monotonic() - started)

    async def _request(
        self,
        what: str,
        method: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        request_timeout: float | None,
        kwargs: dict[str, Any],
    ) -> Obj:
        timeout = request_timeout or self.timeout
        try:
            resp: aiohttp.ClientResponse = await method(
                *args, _preload_content=False, _request_timeout=timeout, **kwargs
            )
            async with resp:
                body = await resp.read()
        except TimeoutError as e:
            # Says nothing of itself: the message names the server that kept silent.
            raise Unavailable(f"{what}: no answer from {self.server} within {timeout:g}s") from e
        except aiohttp.ClientError as e:
            raise Unavailable(f"{what}: {self.server}: {type(e).__name__}: {e}") from e
        if resp.status >= 300:
            raise from_response(resp.status, body, resp.headers, what)
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise KubeError(f"{what}: response is not JSON: {e}", status=resp.status) from e
        if not isinstance(parsed, dict):
            raise KubeError(f"{what}: response is not a JSON object", status=resp.status)
        return parsed
