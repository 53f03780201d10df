"""The webhook's worst inputs: admission reviews of pods built to be as costly to read as a
request may be (tests/unit/webhook/test_worst_inputs.py checks each is answered; the stalls
bench times them)."""

from collections.abc import Iterator
from typing import Any

import orjson

from hami.engine.admission import AdmissionConfig
from hami.engine.injection import InjectionConfig, driver_profile
from tests.builders import FAMILIES, submitted_pod

STANDALONE = AdmissionConfig(
    injection=InjectionConfig(
        mode="standalone",
        driver=driver_profile("gke", "", ""),
        hook_path="/home/kubernetes/bin/nvidia/vgpu",
    ),
    families=FAMILIES,
)


def review(pod: Any) -> bytes:
    return orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "operation": "CREATE",
                "namespace": "attack",
                "object": pod,
            },
        }
    )


def gpu(n: object = 1, **extra: Any) -> dict[str, Any]:
    return {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": n}}, **extra}


def pod(*containers: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    """submitted_pod of `containers`, `metadata` in its metadata."""
    return submitted_pod(*containers, metadata=metadata)


def worst() -> Iterator[tuple[str, bytes, bool]]:
    """(what, body, whether it is admitted)."""
    yield "2e9 GPUs", review(pod(gpu(2_000_000_000))), False
    yield "1Ei GPUs", review(pod(gpu("1Ei"))), False
    yield "5000 containers", review(pod(*({**gpu(), "name": f"c{i}"} for i in range(5000)))), False
    many_env = [{"name": f"E{i}", "value": "v" * 20} for i in range(60_000)]
    yield "3 MiB of env", review(pod(gpu(env=many_env))), True
    # Deeper than orjson encodes, so spliced in as text.
    nested = b'{"a":' * 900 + b'"x"' + b"}" * 900
    body = review(pod(gpu(), annotations={"x": "NESTED"})).replace(b'"NESTED"', nested)
    yield "nested 900 deep", body, False
    yield "a 3 MiB annotation", review(pod(gpu(), annotations={"a": "x" * (3 * 2**20)})), True
