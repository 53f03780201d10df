"""With --dra-bookkeeping, `hami serve` refuses to start where it could never list the DRA
objects (it would never become ready), saying what to change; over the real client's paths."""

import pytest
from aiohttp import web

from hami.runtime.preflight import require_dra_api
from tests.fakes.httpapi import Handler, Serve, serve

__all__ = ["serve"]  # the fixture, for pytest

V1 = "/apis/resource.k8s.io/v1"


def answer(status: int) -> Handler:
    async def handle(_: web.Request) -> web.Response:
        if status == 200:
            return web.json_response({"items": [], "metadata": {"resourceVersion": "1"}})
        body = {"kind": "Status", "code": status, "message": f"status {status}"}
        return web.json_response(body, status=status)

    return handle


async def test_a_cluster_serving_the_dra_objects_starts(serve: Serve) -> None:
    paths = ("resourceslices", "resourceclaims", "deviceclasses")
    kube = await serve({f"{V1}/{p}": answer(200) for p in paths})
    await require_dra_api(kube)


@pytest.mark.parametrize(
    ("status", "says"),
    [
        (404, "on Kubernetes before 1.34 run with --dra-bookkeeping=false"),
        (403, "the chart's ClusterRole grants them), or --dra-bookkeeping=false"),
    ],
)
async def test_a_cluster_that_cannot_list_them_is_refused_with_the_fix(
    serve: Serve, status: int, says: str
) -> None:
    kube = await serve({f"{V1}/resourceslices": answer(status)})
    with pytest.raises(OSError, match="resourceslices") as refused:
        await require_dra_api(kube)
    assert says in str(refused.value)


async def test_an_api_server_not_answering_is_left_to_the_informers(serve: Serve) -> None:
    kube = await serve({f"{V1}/resourceslices": answer(503)})
    await require_dra_api(kube)
