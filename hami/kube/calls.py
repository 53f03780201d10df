"""The one place that issues requests to the API server.

Every call goes through kubernetes_asyncio's generated methods with
`_preload_content=False` and parses the body with orjson: dicts are several
times cheaper than generated models, and raw responses sidestep the library's
V1Binding deserialisation bug. Every call carries a timeout because the
library's default is to wait forever.
"""

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient, CoordinationV1Api, CoreV1Api, PolicyV1Api

from hami.kube.errors import KubeError, Unavailable, from_response

Obj = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class ApiCalls:
    """The API groups hami uses and the request method every call of :class:`Kube` goes through."""

    def __init__(
        self, api: ApiClient, *, timeout: float = 10.0, list_timeout: float = 60.0
    ) -> None:
        self.api = api
        self.core = CoreV1Api(api)
        self.coordination = CoordinationV1Api(api)
        self.policy = PolicyV1Api(api)
        self.timeout = timeout
        # A page of a list is read from etcd and can be hundreds of objects: far slower than
        # a point read on a busy server.
        self.list_timeout = list_timeout

    async def close(self) -> None:
        await self.api.close()

    async def _call(
        self,
        what: str,
        method: Callable[..., Awaitable[Any]],
        *args: Any,
        request_timeout: float | None = None,
        **kwargs: Any,
    ) -> Obj:
        try:
            resp: aiohttp.ClientResponse = await method(
                *args,
                _preload_content=False,
                _request_timeout=request_timeout or self.timeout,
                **kwargs,
            )
            async with resp:
                body = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as e:
            raise Unavailable(f"{what}: {type(e).__name__}: {e}") from e
        if resp.status >= 300:
            raise from_response(resp.status, body, resp.headers, what)
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise KubeError(f"{what}: response is not JSON: {e}", status=resp.status) from e
        if not isinstance(parsed, dict):
            raise KubeError(f"{what}: response is not a JSON object", status=resp.status)
        return parsed
