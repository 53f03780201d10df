"""POST /filter and /bind over real HTTP, against a real ClusterCache and Placement.

Covers the wire shapes kube-scheduler sends (PascalCase keys, nodeCacheCapable
true and false), the answers it relies on (returned names are a subset of the
input, failedNodes say why) and the adapter-level bind answers that need no API
server. Binding itself is left to the e2e tests.
"""

import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpClient

import hami.extender.routes
from hami.cache.store import ClusterCache
from hami.engine import reasons
from hami.engine.model import ContainerDevice
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.kube.events import EventRecorder
from hami.kube.leader import AlwaysLeader
from hami.runtime.bodies import MAX_BODY
from hami.service.annotations import allocation_annotations
from hami.service.binding import Binder
from hami.service.bindrules import Budget
from hami.service.nodelock.table import NodeLocks
from hami.service.nodelock.wire import lock_keys
from hami.service.placement import FilterOutcome, Placement
from tests.builders import FAMILIES, registered_node, t4s
from tests.fakes.kubeapi import FakeKube

Client = TestClient[web.Request, web.Application]
Obj = dict[str, Any]

REGISTERED = ("node-a", "node-b", "node-c")
BARE = "node-bare"  # a Node without the device plugin's registration
UNKNOWN = ("node-x", "node-y")  # names kube-scheduler knows and the cache does not


def bare_node(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"nvidia.com/gpu": "10"}},
    }


def pod(
    uid: str = "uid-1", memory: int | None = 100, annotations: dict[str, str] | None = None
) -> Obj:
    limits = {} if memory is None else {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(memory)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{uid}",
            "namespace": "team-a",
            "uid": uid,
            "annotations": annotations or {},
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [{"name": "c", "image": "busybox", "resources": {"limits": limits}}],
        },
    }


class NeverBinder(Binder):
    """The cases here must be answered before a bind is attempted."""

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        raise AssertionError(f"bind of {namespace}/{name} reached the Binder")


class Harness:
    def __init__(self) -> None:
        self.cache = ClusterCache(
            clock=lambda: 0.0, families=FAMILIES, resources=ResourceDefaults()
        )
        self.cache.replace_nodes(
            [*(registered_node(n, t4s(2, f"GPU-{n}")) for n in REGISTERED), bare_node(BARE)]
        )
        self.placement = Placement(self.cache, Defaults(), ResourceDefaults())
        self.closed: str | None = None
        self.paced = 0
        self.filtered: list[FilterOutcome] = []
        self.observed: list[tuple[str, str]] = []

    async def pace(self) -> None:
        self.paced += 1

    async def gate(self) -> str | None:
        return self.closed


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    k = FakeKube()
    yield k
    assert k.calls == [], "no case here may reach the API server"


@pytest.fixture
def harness() -> Harness:
    return Harness()


@pytest.fixture
async def client(aiohttp_client: AiohttpClient, harness: Harness, kube: FakeKube) -> Client:
    h = harness
    binder = NeverBinder(
        kube,
        h.cache,
        EventRecorder(kube),
        now=lambda: datetime.now(UTC),
        locks=NodeLocks(keys=lock_keys(FAMILIES)),
        leadership=AlwaysLeader(),
        budget=Budget.within(timedelta(seconds=30), 5.0),
    )
    app = web.Application(client_max_size=MAX_BODY)
    app.add_routes(
        hami.extender.routes.routes(
            h.placement,
            binder,
            h.gate,
            h.pace,
            h.filtered.append,
            lambda r, _: h.observed.append(("filter", r)),
            lambda r, _: h.observed.append(("bind", r)),
        )
    )
    return await aiohttp_client(app)


async def call(client: Client, verb: str, doc: Any) -> Obj:
    data = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    resp = await client.post(f"/{verb}", data=data, headers={"Content-Type": "application/json"})
    assert resp.status == 200, (
        await resp.text()
    )  # kube-scheduler reads non-200 as transport failure
    assert resp.content_type == "application/json"
    answer = orjson.loads(await resp.read())
    assert isinstance(answer, dict)
    return answer


def assert_subset(answer: Obj, sent: list[str]) -> None:
    returned = answer.get("nodenames") or []
    assert set(returned) <= set(sent), f"returned {returned} not in the input {sent}"


# --- /filter: wire shapes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda p, ns: {"Pod": p, "Nodes": None, "NodeNames": ns}, id="pascal"),
        pytest.param(lambda p, ns: {"pod": p, "nodenames": ns}, id="lower"),
        pytest.param(lambda p, ns: {"POD": p, "nodeNames": ns}, id="mixed"),
        pytest.param(
            lambda p, ns: {
                "Pod": p,
                "Nodes": {
                    "metadata": {},
                    "items": [registered_node(n, t4s(2, f"GPU-{n}")) for n in ns],
                },
                "NodeNames": None,
            },
            id="not-node-cache-capable",
        ),
    ],
)
async def test_filter_shapes_place_a_gpu_pod_on_one_input_node(
    client: Client, harness: Harness, make: Callable[[Obj, list[str]], Obj]
) -> None:
    sent = list(REGISTERED)
    answer = await call(client, "filter", make(pod(), sent))
    assert "error" not in answer, answer
    assert len(answer["nodenames"]) == 1
    assert_subset(answer, sent)
    # The decision is held as a reservation; nothing was written anywhere.
    reservation = harness.cache.reservation("uid-1")
    assert reservation is not None and reservation.node == answer["nodenames"][0]
    assert harness.observed == [("filter", "fit")]
    assert [o.pod.uid for o in harness.filtered] == ["uid-1"]
    assert harness.paced == 1, "a decision waits for the API server to keep up with our writes"


async def test_filter_of_a_pod_the_cache_knows_bound_places_nothing(
    client: Client, harness: Harness
) -> None:
    bound = pod(
        annotations=allocation_annotations(
            "node-a", ((ContainerDevice("GPU-node-a-0", 100, 0),),), 0, families=FAMILIES
        )
    )
    bound["spec"]["nodeName"] = "node-a"
    harness.cache.upsert_pod(bound)
    before = dict(harness.cache.usage().get("node-b", {}))
    # A replay, or kube-scheduler's cache behind ours: neither a second reservation nor a node.
    answer = await call(client, "filter", {"Pod": bound, "NodeNames": ["node-b", "node-c"]})
    assert answer == {
        "error": "pod team-a/pod-uid-1 is already bound to node node-a; there is nothing to place"
    }
    assert harness.cache.reservation("uid-1") is None
    assert dict(harness.cache.usage().get("node-b", {})) == before


async def test_missing_pod_is_an_error(client: Client, harness: Harness) -> None:
    answer = await call(client, "filter", {"NodeNames": list(REGISTERED)})
    assert answer == {"error": "extender args missing pod"}
    assert harness.observed == [("filter", "error")]
    assert harness.filtered == []


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        pytest.param(b"{not json", "body is not JSON", id="not-json"),
        pytest.param(b"\xff\xfe\x00", "body is not JSON", id="not-utf8"),
        pytest.param(b"[" * 100_000, "body is not JSON", id="nested-100k"),
        pytest.param(b"[]", "body is not a JSON object", id="array"),
        pytest.param({"Pod": "pod"}, "extender args missing pod", id="pod-not-object"),
        pytest.param(
            {"Pod": pod(), "NodeNames": "node-a"}, "nodenames must be a list", id="names-str"
        ),
        pytest.param(
            {"Pod": pod(), "NodeNames": [1, 2]}, "nodenames must be a list", id="names-ints"
        ),
        pytest.param(
            {"Pod": pod(), "Nodes": {"items": "node-a"}},
            "nodes.items must be a list",
            id="items-str",
        ),
        pytest.param(
            {"Pod": pod(), "Nodes": {"items": ["node-a"]}},
            "nodenames must be a list",
            id="items-not-nodes",
        ),
        pytest.param(
            {"Pod": pod(), "Nodes": {"items": [{"metadata": "node-a"}]}},
            "nodenames must be a list",
            id="item-metadata-str",
        ),
        pytest.param(
            {"Pod": pod(), "Nodes": {"items": [{"metadata": {}}]}},
            "nodenames must be a list",
            id="item-without-name",
        ),
        # Decodable, but not a pod: refused naming the field, before the service runs.
        pytest.param(
            {"Pod": {"spec": "x"}, "NodeNames": ["node-a"]},
            "pod.spec must be an object",
            id="spec-str",
        ),
        pytest.param(
            {"Pod": {**pod(), "metadata": "x"}, "NodeNames": ["node-a"]},
            "pod.metadata must be an object",
            id="metadata-str",
        ),
        pytest.param(
            {"Pod": {"spec": {"containers": "c"}}, "NodeNames": ["node-a"]},
            "pod.spec.containers must be a list",
            id="containers-str",
        ),
        pytest.param(
            {"Pod": {**pod(), "metadata": {"uid": 7}}, "NodeNames": ["node-a"]},
            "pod.metadata.uid must be a string",
            id="uid-int",
        ),
        pytest.param(
            {"Pod": {"spec": {"containers": [{"name": "c"}], "initContainers": 1}}},
            "pod.spec.initContainers must be a list",
            id="init-int",
        ),
        pytest.param(
            {"Pod": {**pod(), "metadata": {"annotations": {"hami.io/gpu-scheduler-policy": 1}}}},
            "must be a string",
            id="annotation-int",
        ),
    ],
)
async def test_malformed_filter_args_get_an_error_answer(
    client: Client, harness: Harness, doc: Any, words: str
) -> None:
    answer = await call(client, "filter", doc)
    assert set(answer) == {"error"}, answer
    assert words in answer["error"]
    assert harness.observed[-1] == ("filter", "error")
    # And the next, well-formed call is answered.
    again = await call(client, "filter", {"Pod": pod("uid-next"), "NodeNames": list(REGISTERED)})
    assert len(again["nodenames"]) == 1


async def test_non_gpu_pod_passes_every_name_through_unchanged(
    client: Client, harness: Harness
) -> None:
    sent = ["node-c", *UNKNOWN, BARE, "node-a", "node-c"]
    answer = await call(client, "filter", {"Pod": pod(memory=None), "NodeNames": sent})
    assert answer == {"nodenames": sent}
    assert harness.observed == [("filter", "passthrough")]
    assert harness.cache.reservation("uid-1") is None


async def test_unregistered_names_fail_with_the_reason(client: Client) -> None:
    sent = [*UNKNOWN, BARE]
    answer = await call(client, "filter", {"Pod": pod(), "NodeNames": sent})
    assert "nodenames" not in answer and "error" not in answer
    failed = answer["failedNodes"]
    assert set(failed) == set(sent)
    # Byte for byte HAMi's reason: kube-scheduler copies it into FailedScheduling.
    assert all(failed[n] == "node unregistered" for n in sent)


async def test_pod_fitting_nowhere_names_every_node_and_why(
    client: Client, harness: Harness
) -> None:
    sent = [*REGISTERED, *UNKNOWN]
    answer = await call(client, "filter", {"Pod": pod(memory=20000), "NodeNames": sent})
    assert "nodenames" not in answer and "error" not in answer
    failed = answer["failedNodes"]
    assert set(failed) == set(sent)
    for n in REGISTERED:
        assert failed[n] == f"2/2 {reasons.CARD_INSUFFICIENT_MEMORY}"
    assert harness.observed == [("filter", "unschedulable")]


async def test_unknown_names_are_never_returned_when_the_pod_fits(client: Client) -> None:
    sent = [UNKNOWN[0], "node-b", UNKNOWN[1]]
    answer = await call(client, "filter", {"Pod": pod(), "NodeNames": sent})
    assert answer["nodenames"] == ["node-b"]


async def test_bad_policy_is_an_error_naming_the_pod(client: Client) -> None:
    doc = {
        "Pod": pod(annotations={"hami.io/gpu-scheduler-policy": "fastest"}),
        "NodeNames": ["node-a"],
    }
    answer = await call(client, "filter", doc)
    assert set(answer) == {"error"}
    assert answer["error"].startswith("pod team-a/pod-uid-1: ")
    assert "fastest" in answer["error"]


async def test_returned_names_are_always_a_subset_of_the_input(client: Client) -> None:
    rng = random.Random(14)
    universe = [*REGISTERED, BARE, *UNKNOWN]
    for i in range(150):
        sent = [rng.choice(universe) for _ in range(rng.randint(0, 7))]
        memory = rng.choice([None, 100, 4000, 15360, 16000])
        # One uid throughout: each filter gives back the previous reservation first.
        answer = await call(client, "filter", {"Pod": pod("uid-prop", memory), "NodeNames": sent})
        assert "error" not in answer, (i, sent, answer)
        assert_subset(answer, sent)
        if memory is None:
            assert answer["nodenames"] == sent
            continue
        returned = answer.get("nodenames") or []
        assert len(returned) <= 1
        assert set(answer.get("failedNodes") or {}) <= set(sent)
        if not returned:
            assert set(answer.get("failedNodes") or {}) == set(sent), (sent, answer)


# --- the gate ---------------------------------------------------------------------------------


# What Runtime.not_serving says; the adapter passes any such reason through as the error.
NOT_SYNCED = "the scheduler's cache has not synced with the API server yet"
NOT_LEADER = "this replica is not the leader; only the leader serves filter and bind"
SHUTTING_DOWN = "this replica is shutting down; kube-scheduler will retry"


@pytest.mark.parametrize(
    "reason",
    [
        pytest.param(NOT_SYNCED, id="not-synced"),
        pytest.param(NOT_LEADER, id="not-leader"),
        pytest.param(SHUTTING_DOWN, id="shutting-down"),
    ],
)
async def test_closed_gate_answers_filter_and_bind_with_an_error(
    client: Client, harness: Harness, reason: str
) -> None:
    harness.closed = reason
    answer = await call(client, "filter", {"Pod": pod(), "NodeNames": list(REGISTERED)})
    assert answer == {"error": reason}
    assert harness.cache.reservation("uid-1") is None  # nothing decided, nothing held
    assert harness.filtered == []
    bind = {"PodName": "p", "PodNamespace": "team-a", "PodUID": "uid-1", "Node": "node-a"}
    assert await call(client, "bind", bind) == {"Error": reason}
    assert harness.observed == [("filter", "error"), ("bind", "error")]
    # Open again: served as usual.
    harness.closed = None
    answer = await call(client, "filter", {"Pod": pod(), "NodeNames": list(REGISTERED)})
    assert len(answer["nodenames"]) == 1


# --- /bind at the adapter -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        pytest.param(b"", "body is not JSON", id="empty"),
        pytest.param(b'{"PodName": "p"', "body is not JSON", id="truncated"),
        pytest.param(b"\xc3\x28", "body is not JSON", id="not-utf8"),
        pytest.param(b'["p", "ns", "node"]', "body is not a JSON object", id="array"),
        pytest.param({}, "binding args missing podName, podNamespace, node", id="empty-object"),
        pytest.param(
            {"PodName": "p", "PodNamespace": "team-a"}, "binding args missing node", id="no-node"
        ),
        pytest.param(
            {"podName": "p", "node": "node-a"},
            "binding args missing podNamespace",
            id="lower-no-namespace",
        ),
        pytest.param(
            {"PodName": 7, "PodNamespace": "team-a", "Node": "node-a"},
            "binding args missing podName",
            id="name-not-string",
        ),
        pytest.param(
            {"PodName": "", "PodNamespace": "team-a", "Node": "node-a"},
            "binding args missing podName",
            id="name-empty",
        ),
    ],
)
async def test_malformed_bind_args_get_an_error_answer(
    client: Client, harness: Harness, doc: Any, words: str
) -> None:
    answer = await call(client, "bind", doc)
    assert set(answer) == {"Error"}
    assert words in answer["Error"]
    assert harness.observed == [("bind", "error")]


# --- the HTTP bench stays runnable ----------------------------------------------------------------


def test_http_bench_runs_on_a_small_cluster() -> None:
    from hami.bench.http import HttpBenchConfig, run_http_bench

    result = run_http_bench(HttpBenchConfig(nodes=20, cards=2, pods=20, requests=30, warmup=5))
    assert "answers: {'fit': 30}" in result.text
    assert "server, adapter observe hook" in result.text and "client round trip" in result.text
    # The CPU figures are what the envelope bench compares with the 5 ms target.
    assert "server, the handler's CPU" in result.text
    cpu = result.figures["server_cpu_p99_ms"]
    assert 0 < cpu <= result.figures["client_round_trip_p99_ms"] * 10
