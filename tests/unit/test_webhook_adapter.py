"""POST /webhook over real HTTP: every body gets an AdmissionReview answer, and the server lives on.

The app is the adapter's own routes around a real AdmissionService, with the
body limit the runtime uses, so what is checked here is what kube-apiserver
meets (design-anchors B6 items 14-16 and 18).
"""

import base64
import io
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpClient

import webhook.routes
from hami.engine.admission import AdmissionConfig
from hami.engine.jsonpatch import apply
from hami.runtime.app import MAX_BODY
from hami.service.admission import AdmissionService

V1 = "admission.k8s.io/v1"
V1BETA1 = "admission.k8s.io/v1beta1"
SCHEDULER = AdmissionConfig().scheduler_name

Client = TestClient[web.Request, web.Application]
Obj = dict[str, Any]


def gpu_pod(**extra_container: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpu", "namespace": "team-a"},
        "spec": {
            "containers": [
                {
                    "name": "cuda",
                    "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}},
                    **extra_container,
                }
            ]
        },
    }


def plain_pod() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain", "namespace": "team-a"},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    }


def review(
    obj: Any,
    *,
    uid: str = "uid-1",
    api_version: str = V1,
    operation: str = "CREATE",
    kind: str = "Pod",
    dry_run: bool = False,
    old: Any = None,
) -> Obj:
    request: Obj = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": kind},
        "resource": {"group": "", "version": "v1", "resource": kind.lower() + "s"},
        "namespace": "team-a",
        "operation": operation,
        "userInfo": {"username": "admin"},
        "object": obj,
        "dryRun": dry_run,
    }
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}


def body(doc: Any) -> bytes:
    return orjson.dumps(doc)


@pytest.fixture
def observed() -> list[tuple[str, float]]:
    return []


@pytest.fixture
async def client(aiohttp_client: AiohttpClient, observed: list[tuple[str, float]]) -> Client:
    app = web.Application(client_max_size=MAX_BODY)
    service = AdmissionService(AdmissionConfig())
    app.add_routes(webhook.routes.routes(service, lambda r, s: observed.append((r, s))))
    return await aiohttp_client(app)


async def post(client: Client, data: bytes) -> Obj:
    # A stream, not bytes: aiohttp warns about large raw bodies (warnings are errors here).
    resp = await client.post(
        "/webhook", data=io.BytesIO(data), headers={"Content-Type": "application/json"}
    )
    assert resp.status == 200, await resp.text()
    assert resp.content_type == "application/json"
    doc = orjson.loads(await resp.read())
    assert isinstance(doc, dict)
    assert doc["kind"] == "AdmissionReview"
    assert set(doc) == {"apiVersion", "kind", "response"}
    return doc


def patch_of(response: Obj) -> list[Obj]:
    assert response["patchType"] == "JSONPatch"
    ops = orjson.loads(base64.b64decode(response["patch"], validate=True))
    assert isinstance(ops, list)
    return ops


async def assert_still_answers(client: Client) -> None:
    """A well-formed GPU review after whatever came before still gets its patch."""
    doc = await post(client, body(review(gpu_pod(), uid="after")))
    assert doc["response"]["uid"] == "after"
    assert doc["response"]["allowed"] is True
    patched = apply(gpu_pod(), patch_of(doc["response"]))
    assert patched["spec"]["schedulerName"] == SCHEDULER


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _deep_in_object(depth: int) -> bytes:
    # Decodable (orjson allows 1024 levels) but deeper than a recursive walk survives.
    doc = body(review(gpu_pod(args="@@"), uid="uid-deep"))
    return doc.replace(b'"@@"', nested(depth))


VALID = body(review(gpu_pod(), uid="uid-trunc"))

# (id, body, apiVersion answered, uid echoed, status code, words in the message)
MALFORMED: list[tuple[str, bytes, str, str, int, str]] = [
    ("empty", b"", V1, "", 400, "body is not JSON"),
    ("not-json", b"hello, webhook", V1, "", 400, "body is not JSON"),
    ("truncated", VALID[: len(VALID) // 2], V1, "", 400, "body is not JSON"),
    ("json-array", b'[{"kind": "AdmissionReview"}]', V1, "", 400, "not an AdmissionReview object"),
    ("json-string", b'"AdmissionReview"', V1, "", 400, "not an AdmissionReview object"),
    ("json-null", b"null", V1, "", 400, "not an AdmissionReview object"),
    (
        "wrong-kind",
        body({**review(plain_pod(), uid="uid-kind"), "kind": "Pod"}),
        V1,
        "uid-kind",
        400,
        "expected kind AdmissionReview",
    ),
    (
        "wrong-apiversion",
        body(review(plain_pod(), uid="uid-version", api_version="admission.k8s.io/v2")),
        V1,
        "uid-version",
        400,
        "expected kind AdmissionReview",
    ),
    (
        "missing-request",
        body({"apiVersion": V1BETA1, "kind": "AdmissionReview"}),
        V1BETA1,
        "",
        400,
        "no request or request.uid",
    ),
    (
        "request-not-object",
        body({"apiVersion": V1, "kind": "AdmissionReview", "request": ["uid", "x"]}),
        V1,
        "",
        400,
        "no request or request.uid",
    ),
    (
        "missing-uid",
        body(review(gpu_pod(), uid="")),
        V1,
        "",
        400,
        "no request or request.uid",
    ),
    (
        "non-utf8",
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview\xff\xfe"}',
        V1,
        "",
        400,
        "body is not JSON",
    ),
    ("nested-100k", nested(100_000), V1, "", 400, "depth limit"),
    (
        "nested-100k-in-object",
        body(review(gpu_pod(args="@@"), uid="uid-deep-100k")).replace(b'"@@"', nested(100_000)),
        V1,
        "",
        400,
        "depth limit",
    ),
    (
        "object-not-a-pod",
        body(review(["not", "a", "pod"], uid="uid-object")),
        V1,
        "uid-object",
        400,
        "request.object is not a Pod object",
    ),
    # Decodable, but 600 levels deep inside the pod: the copy and the diff recurse.
    ("nested-600-in-object", _deep_in_object(600), V1, "uid-deep", 400, "nested too deeply"),
    (
        "request-kind-is-a-string",
        body(
            {
                **review(plain_pod(), uid="uid-rkind"),
                "request": {**review(plain_pod(), uid="uid-rkind")["request"], "kind": "Pod"},
            }
        ),
        V1,
        "uid-rkind",
        500,
        "cannot review",
    ),
    (
        "metadata-is-a-string",
        body(review({**plain_pod(), "metadata": "plain"}, uid="uid-meta")),
        V1,
        "uid-meta",
        500,
        "cannot review",
    ),
]


@pytest.mark.parametrize(
    ("data", "version", "uid", "code", "words"),
    [pytest.param(*case[1:], id=case[0]) for case in MALFORMED],
)
async def test_malformed_review_gets_an_answer_and_the_server_lives_on(
    client: Client,
    observed: list[tuple[str, float]],
    data: bytes,
    version: str,
    uid: str,
    code: int,
    words: str,
) -> None:
    doc = await post(client, data)
    assert doc["apiVersion"] == version
    response = doc["response"]
    assert response["uid"] == uid
    assert response["allowed"] is False
    assert "patch" not in response
    assert response["status"]["code"] == code
    assert words in response["status"]["message"]
    assert observed and observed[-1][0] in {"malformed", "denied", "error"}
    await assert_still_answers(client)


async def test_body_over_the_limit_is_413_and_the_server_lives_on(client: Client) -> None:
    pod = gpu_pod()
    pod["metadata"]["annotations"] = {"filler": "x" * (MAX_BODY + 1)}
    resp = await client.post("/webhook", data=io.BytesIO(body(review(pod))))
    assert resp.status == 413
    await assert_still_answers(client)


@pytest.mark.parametrize("version", [V1, V1BETA1])
async def test_each_version_is_answered_in_its_own(client: Client, version: str) -> None:
    doc = await post(client, body(review(gpu_pod(), uid=f"uid-{version}", api_version=version)))
    assert doc["apiVersion"] == version
    assert doc["response"]["uid"] == f"uid-{version}"
    assert doc["response"]["allowed"] is True


async def test_gpu_pod_patch_sets_scheduler_and_reinvocation_adds_nothing(
    client: Client, observed: list[tuple[str, float]]
) -> None:
    pod = gpu_pod()
    doc = await post(client, body(review(pod)))
    response = doc["response"]
    assert response["allowed"] is True
    patched = apply(pod, patch_of(response))
    assert patched["spec"]["schedulerName"] == SCHEDULER
    assert observed[-1][0] == "allowed"

    again = await post(client, body(review(patched, uid="uid-2")))
    assert again["response"] == {"uid": "uid-2", "allowed": True}


async def test_dry_run_gets_the_same_answer(client: Client) -> None:
    wet = await post(client, body(review(gpu_pod(), uid="same")))
    dry = await post(client, body(review(gpu_pod(), uid="same", dry_run=True)))
    assert dry == wet
    assert "patch" in dry["response"]


async def test_a_one_mib_pod_is_handled(client: Client, capsys: pytest.CaptureFixture[str]) -> None:
    # Annotations just under the API server's 256 KiB total; the rest of the MiB is env.
    env = [{"name": f"VAR_{i:05d}", "value": "v" * 500} for i in range(1500)]
    pod = gpu_pod(env=env)
    pod["metadata"]["annotations"] = {f"example.com/note-{i}": "a" * 1000 for i in range(250)}
    data = body(review(pod, uid="uid-big"))
    assert len(data) >= 2**20
    started = time.perf_counter()
    doc = await post(client, data)
    elapsed = time.perf_counter() - started
    with capsys.disabled():
        print(
            f"\n[webhook] {len(data) / 2**20:.2f} MiB AdmissionReview answered in "
            f"{elapsed * 1000:.1f} ms (client round trip)"
        )
    response = doc["response"]
    assert response["uid"] == "uid-big"
    assert response["allowed"] is True
    patched = apply(pod, patch_of(response))
    assert patched["spec"]["schedulerName"] == SCHEDULER
    assert patched["spec"]["containers"][0]["env"][: len(env)] == env


@pytest.mark.parametrize(
    ("make", "operation", "kind"),
    [
        pytest.param(gpu_pod, "UPDATE", "Pod", id="update-gpu-pod"),
        pytest.param(gpu_pod, "DELETE", "Pod", id="delete-gpu-pod"),
        pytest.param(gpu_pod, "CONNECT", "Pod", id="connect-gpu-pod"),
        pytest.param(
            lambda: {"metadata": {"name": "cm"}, "data": {}}, "CREATE", "ConfigMap", id="configmap"
        ),
        pytest.param(gpu_pod, "CREATE", "Deployment", id="deployment-kind"),
        pytest.param(plain_pod, "CREATE", "Pod", id="non-gpu-pod"),
    ],
)
async def test_not_ours_is_allowed_untouched(
    client: Client, make: Callable[[], Obj], operation: str, kind: str
) -> None:
    obj = make()
    doc = await post(
        client, body(review(obj, uid="uid-x", operation=operation, kind=kind, old=obj))
    )
    assert doc["response"] == {"uid": "uid-x", "allowed": True}
