"""Paged LISTs and WATCH streams of the few resources the informers follow."""

import asyncio
import functools
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Literal

import aiohttp
import orjson

from hami.kube.calls import ApiCalls, Obj
from hami.kube.errors import Unavailable, from_response

Resource = Literal[
    "pods", "nodes", "resourcequotas", "leases", "resourceslices", "resourceclaims", "deviceclasses"
]
# resource.k8s.io/v1's, as the DRA bookkeeping reads them (hami.cache.dra).
DRA_RESOURCES: tuple[Resource, ...] = ("resourceslices", "resourceclaims", "deviceclasses")

# etcd caps an object at 1.5 MiB of protobuf; the same object as JSON can be
# larger, so a watch line gets generous head room before it counts as corrupt.
MAX_WATCH_LINE = 16 * 2**20
# Objects per LIST page, as client-go's reflector asks for: a page of pods is a few MiB of
# JSON, so the decoded page, not the whole cluster, is what a list holds at once. Since
# Kubernetes 1.34 (ListFromCacheSnapshot) kube-apiserver serves every page of a consistent
# list from its watch cache, not etcd; pages of 5,000 measured no clearly cheaper for it.
LIST_PAGE = 500


class ListWatch(ApiCalls):
    """Lists page by page from one snapshot, and watches from its resourceVersion."""

    def _lister(self, resource: Resource, namespace: str | None) -> Callable[..., Awaitable[Any]]:
        """Cluster-wide lists, but for leases: the scheduler may only read its own namespace's."""
        if resource == "leases":
            return functools.partial(self.coordination.list_namespaced_lease, namespace or "")
        if resource == "pods":
            return self.core.list_pod_for_all_namespaces
        if resource == "resourcequotas":
            return self.core.list_resource_quota_for_all_namespaces
        if resource == "resourceslices":
            return self.resource.list_resource_slice
        if resource == "resourceclaims":
            return self.resource.list_resource_claim_for_all_namespaces
        if resource == "deviceclasses":
            return self.resource.list_device_class
        return self.core.list_node

    async def list_pages(
        self,
        resource: Resource,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        namespace: str | None = None,
    ) -> AsyncGenerator[tuple[list[Obj], str], None]:
        """One consistent list, LIST_PAGE objects at a time: (items, the list's resourceVersion).

        Every page comes from the same snapshot, whose resourceVersion is the one to watch from.
        The next page is asked for before this one is yielded, so the server makes it while the
        caller takes this one in (at 150,000 pods, each side's seconds overlap instead of
        adding up). Raises Gone when the server no longer holds the snapshot (a continue token
        expires after some minutes); the caller must list again from the start.
        """

        def ask(token: str | None) -> asyncio.Future[Obj]:
            return asyncio.ensure_future(
                self._call(
                    f"list {resource}",
                    self._lister(resource, namespace),
                    request_timeout=self.list_timeout,
                    limit=LIST_PAGE,
                    _continue=token,
                    label_selector=label_selector,
                    field_selector=field_selector,
                )
            )

        fetch = ask(None)
        try:
            while True:
                page = await fetch
                metadata = page.get("metadata") or {}
                token = metadata.get("continue") or None
                if token is not None:
                    fetch = ask(token)
                yield page.get("items") or [], str(metadata.get("resourceVersion", ""))
                if token is None:
                    return
        finally:
            _abandon(fetch)

    async def list_objects(self, resource: Resource) -> tuple[list[Obj], str]:
        """A consistent full list held in memory: (items, the resourceVersion to watch from)."""
        pages = [page async for page in self.list_pages(resource)]
        return [obj for items, _ in pages for obj in items], pages[-1][1]

    async def watch_objects(
        self,
        resource: Resource,
        resource_version: str,
        *,
        timeout_seconds: int,
        inactivity: float,
        label_selector: str | None = None,
        field_selector: str | None = None,
        namespace: str | None = None,
        connected: Callable[[], None] | None = None,
    ) -> AsyncGenerator[Obj, None]:
        """Raw watch events as dicts, until the server ends the watch; `connected` is called
        once the server has accepted it (contact, though no event may come for a while).

        Raises Gone when the server refuses `resource_version` at connect,
        Unavailable on network trouble or when nothing, not even a bookmark,
        arrived for `inactivity` seconds.
        """
        what = f"watch {resource} from {resource_version}"
        timeout = aiohttp.ClientTimeout(
            # The server closes the watch after timeout_seconds; the margin
            # lets it do so cleanly before the client gives up.
            total=timeout_seconds + 30,
            sock_connect=self.timeout,
            sock_read=inactivity,
        )
        try:
            resp: aiohttp.ClientResponse = await self._lister(resource, namespace)(
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                label_selector=label_selector,
                field_selector=field_selector,
                _preload_content=False,
                _request_timeout=timeout,
            )
        except (aiohttp.ClientError, TimeoutError) as e:
            raise Unavailable(f"{what}: {type(e).__name__}: {e}") from e
        async with resp:
            if resp.status >= 300:
                try:
                    body = await resp.read()
                except (aiohttp.ClientError, TimeoutError):
                    body = b""
                raise from_response(resp.status, body, resp.headers, what)
            if connected is not None:
                connected()
            # The raw line stays inside _next_event: a generator suspended at `yield` would
            # otherwise hold it until the next event arrives, minutes on a quiet watch.
            while (event := await _next_event(resp, what)) is not None:
                yield event


def _abandon(fetch: asyncio.Future[Obj]) -> None:
    """Drop a page asked for that the caller will not read (it left the list early)."""
    if not fetch.done():
        fetch.cancel()
    elif not fetch.cancelled():
        fetch.exception()  # read, so that a failure of a page nobody wants is not logged


async def _next_event(resp: aiohttp.ClientResponse, what: str) -> Obj | None:
    """The next watch event, decoded; None when the server ended the watch."""
    line = b""
    while not line.strip():
        try:
            line = await resp.content.readline(max_line_length=MAX_WATCH_LINE)
        except (aiohttp.ClientError, TimeoutError) as e:
            raise Unavailable(f"{what}: {type(e).__name__}: {e}") from e
        if not line:
            return None
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise Unavailable(f"{what}: malformed event: {e}") from e
    if not isinstance(event, dict):
        raise Unavailable(f"{what}: an event is not a JSON object")
    return event
