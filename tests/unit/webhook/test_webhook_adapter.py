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

import hami.webhook.routes
from hami.engine.admission import AdmissionConfig
from hami.engine.injection import InjectionConfig, driver_profile
from hami.engine.jsonpatch import apply
from hami.runtime.bodies import MAX_BODY
from hami.service.admission import AdmissionService
from tests.builders import FAMILIES

V1 = "admission.k8s.io/v1"
V1BETA1 = "admission.k8s.io/v1beta1"
SCHEDULER = AdmissionConfig(families=FAMILIES).scheduler_name

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
    service = AdmissionService(AdmissionConfig(families=FAMILIES))
    app.add_routes(hami.webhook.routes.routes(service, lambda r, s: observed.append((r, s))))
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
        "request.object must be an object",
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
        400,
        "request.kind must be an object",
    ),
    (
        "metadata-is-a-string",
        body(review({**plain_pod(), "metadata": "plain"}, uid="uid-meta")),
        V1,
        "uid-meta",
        400,
        "request.object.metadata must be an object",
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


# --- wrong types --------------------------------------------------------------------------------

STANDALONE = AdmissionConfig(
    injection=InjectionConfig(
        mode="standalone", driver=driver_profile("gke"), hook_path="/home/kubernetes/bin/vgpu"
    ),
    families=FAMILIES,
)


@pytest.fixture
async def standalone(aiohttp_client: AiohttpClient) -> Client:
    """Standalone injection writes the most: volumes, mounts, env and annotations."""
    app = web.Application(client_max_size=MAX_BODY)
    app.add_routes(hami.webhook.routes.routes(AdmissionService(STANDALONE), lambda r, s: None))
    return await aiohttp_client(app)


def full_pod() -> Obj:
    """A GPU pod with every field admission reads present once."""
    container = {
        "name": "cuda",
        "image": "cuda",
        "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "1"}},
        "securityContext": {"privileged": False},
        "env": [{"name": "A", "value": "a"}, {"name": "B", "valueFrom": {"fieldRef": {}}}],
        "volumeMounts": [
            {"name": "data", "mountPath": "/data", "readOnly": False, "subPath": "d"},
            {"name": "data", "mountPath": "/more", "subPathExpr": "$(A)"},
        ],
    }
    return {
        "metadata": {
            "name": "full",
            "generateName": "full-",
            "labels": {"team": "a"},
            "annotations": {"note": "n"},
        },
        "spec": {
            "initContainers": [{"name": "setup", "image": "busybox"}],
            "containers": [container],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "schedulerName": "default-scheduler",
            "nodeName": "",
            "runtimeClassName": "nvidia",
            "hostPID": False,
        },
    }


C0 = ("object", "spec", "containers", 0)
# (path under request, expected type, JSON null allowed)
FIELDS: list[tuple[tuple[str | int, ...], str, bool]] = [
    (("kind",), "object", False),
    (("kind", "kind"), "string", False),
    (("operation",), "string", False),
    (("object",), "object", False),
    (("object", "metadata"), "object", True),
    (("object", "metadata", "name"), "string", True),
    (("object", "metadata", "generateName"), "string", True),
    (("object", "metadata", "labels"), "object", True),
    (("object", "metadata", "labels", "team"), "string", False),
    (("object", "metadata", "annotations"), "object", True),
    (("object", "metadata", "annotations", "note"), "string", False),
    (("object", "spec"), "object", False),
    (("object", "spec", "containers"), "list", True),
    (C0, "object", False),
    ((*C0, "name"), "string", False),
    ((*C0, "resources"), "object", True),
    ((*C0, "resources", "limits"), "object", True),
    ((*C0, "resources", "limits", "nvidia.com/gpu"), "quantity", False),
    ((*C0, "resources", "requests"), "object", True),
    ((*C0, "resources", "requests", "cpu"), "quantity", False),
    ((*C0, "securityContext"), "object", True),
    ((*C0, "securityContext", "privileged"), "boolean", True),
    ((*C0, "env"), "list", True),
    ((*C0, "env", 0), "object", False),
    ((*C0, "env", 0, "name"), "string", False),
    ((*C0, "env", 0, "value"), "string", True),
    ((*C0, "env", 1, "valueFrom"), "object", True),
    ((*C0, "volumeMounts"), "list", True),
    ((*C0, "volumeMounts", 0), "object", False),
    ((*C0, "volumeMounts", 0, "mountPath"), "string", False),
    ((*C0, "volumeMounts", 0, "readOnly"), "boolean", True),
    ((*C0, "volumeMounts", 0, "subPath"), "string", True),
    ((*C0, "volumeMounts", 1, "subPathExpr"), "string", True),
    (("object", "spec", "initContainers"), "list", True),
    (("object", "spec", "initContainers", 0), "object", False),
    (("object", "spec", "initContainers", 0, "name"), "string", False),
    (("object", "spec", "volumes"), "list", True),
    (("object", "spec", "volumes", 0), "object", False),
    (("object", "spec", "volumes", 0, "name"), "string", False),
    (("object", "spec", "schedulerName"), "string", True),
    (("object", "spec", "nodeName"), "string", True),
    (("object", "spec", "runtimeClassName"), "string", True),
    (("object", "spec", "hostPID"), "boolean", True),
]
SAMPLES: dict[str, Any] = {"string": "x", "number": 7, "float": 1.5, "boolean": True, "list": []}
SAMPLES |= {"object": {}, "null": None}
FITS = {
    "string": {"string"},
    "object": {"object"},
    "list": {"list"},
    "boolean": {"boolean"},
    "quantity": {"string", "number", "float"},
}
MESSAGE = {"quantity": "a quantity (a string or a number)", "object": "an object", "list": "a list"}


def field_path(path: tuple[str | int, ...]) -> str:
    """The path as the denial names it: request.object.spec.containers[0].env."""
    out = "request"
    for prev, step in zip(("request", *path), path, strict=False):
        in_map = prev in ("labels", "annotations", "limits", "requests")
        out += f"[{step}]" if isinstance(step, int) or in_map else f".{step}"
    return out


def with_value(path: tuple[str | int, ...], value: Any) -> Obj:
    doc = review(full_pod(), uid="uid-typed")
    node: Any = doc["request"]
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return doc


WRONG = [
    pytest.param(path, sample, kind, id=f"{field_path(path)}={sample}")
    for path, kind, nullable in FIELDS
    for sample in SAMPLES
    if sample not in FITS[kind] and not (sample == "null" and nullable)
]


@pytest.mark.parametrize(("path", "sample", "kind"), WRONG)
async def test_wrong_typed_field_is_a_400_naming_it(
    standalone: Client, path: tuple[str | int, ...], sample: str, kind: str
) -> None:
    doc = await post(standalone, body(with_value(path, SAMPLES[sample])))
    response = doc["response"]
    assert response["uid"] == "uid-typed"
    assert response["allowed"] is False
    expected = f"{field_path(path)} must be {MESSAGE.get(kind, f'a {kind}')}"
    assert response["status"] == {"code": 400, "reason": "BadRequest", "message": expected}


async def test_the_table_starts_from_a_pod_that_is_admitted_and_patched(standalone: Client) -> None:
    assert len(WRONG) >= 160
    response = (await post(standalone, body(with_value(("uid",), "uid-typed"))))["response"]
    assert response["allowed"] is True and patch_of(response)


def drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=field_path(p)) for p, _, nullable in FIELDS if nullable]
)
async def test_null_is_read_as_absent(standalone: Client, path: tuple[str | int, ...]) -> None:
    null = with_value(path, None)
    absent = with_value(path, None)
    parent: Any = absent["request"]
    for step in path[:-1]:
        parent = parent[step]
    del parent[path[-1]]
    answers = [(await post(standalone, body(d)))["response"] for d in (null, absent)]
    assert [a["allowed"] for a in answers] == [answers[1]["allowed"]] * 2
    assert [a.get("status") for a in answers] == [answers[1].get("status")] * 2
    if answers[1]["allowed"]:
        stored = [
            apply(d["request"]["object"], patch_of(a)) if "patch" in a else d["request"]["object"]
            for d, a in zip((null, absent), answers, strict=True)
        ]
        assert drop_nulls(stored[0]) == drop_nulls(stored[1])


async def test_the_dra_claims_a_gpu_pod_names_are_read_before_it_is_judged(
    aiohttp_client: AiohttpClient,
) -> None:
    """The route reads each claim or template a GPU pod names through the service's reader
    (hami.service.claims) and refuses one of a GPU DeviceClass; a pod without GPU resources,
    or without claims, costs no read."""
    read: list[str] = []

    async def reader(namespace: str, kind: str, name: str) -> Obj | None:
        read.append(f"{namespace}/{kind}/{name}")
        device_class = "gpu.nvidia.com" if name == "two" else "rdma.example.com"
        return {
            "spec": {
                "spec": {"devices": {"requests": [{"exactly": {"deviceClassName": device_class}}]}}
            }
        }

    app = web.Application(client_max_size=MAX_BODY)
    app.add_routes(
        hami.webhook.routes.routes(
            AdmissionService(AdmissionConfig(families=FAMILIES), claims=reader), lambda *_: None
        )
    )
    client = await aiohttp_client(app)

    def claiming(pod: Obj, template: str) -> Obj:
        pod["spec"]["resourceClaims"] = [{"name": "c", "resourceClaimTemplateName": template}]
        return pod

    refused = (await post(client, body(review(claiming(gpu_pod(), "two")))))["response"]
    assert refused["allowed"] is False
    assert "which asks DeviceClass gpu.nvidia.com for GPUs" in refused["status"]["message"]
    admitted = await post(client, body(review(claiming(gpu_pod(), "rdma"))))
    assert admitted["response"]["allowed"] is True
    assert read == ["team-a/ResourceClaimTemplate/two", "team-a/ResourceClaimTemplate/rdma"]
    await post(client, body(review(claiming(plain_pod(), "two"))))
    await post(client, body(review(gpu_pod())))
    assert len(read) == 2
