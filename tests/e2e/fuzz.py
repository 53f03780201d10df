"""Fuzzed request bodies from a fixed seed: AdmissionReviews, /filter and /bind.

A mix of what kube-apiserver and kube-scheduler send (GPU pods of every shape, real node
names), the same with one field of the wrong type or missing, and noise. Extender pod uids are
random, so every decision that fits is a reservation for a pod the watch never shows: the
attack of a caller that is not kube-scheduler.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

_RESOURCES = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
)
_ODD_VALUES: tuple[Any, ...] = (
    None, True, -1, 0, 1, 2, 2**31, 2**63, 10**30, "1", "1Ei", "1E", "1e3", "500m", "x", "", [], {},
    "99999999999999999999", 1.5, "0.5",
)  # fmt: skip
_POLICIES = ("binpack", "spread", "mutex", "mutex,binpack", "numa", "Binpack", "", "x" * 300)


def _value(rng: random.Random) -> Any:
    if rng.random() < 0.7:
        return str(rng.choice((1, 1, 2, 4, 1000, 4000, 15360, 30, 50, 100)))
    return rng.choice(_ODD_VALUES)


_OWNED = (
    "hami.io/vgpu-devices-allocated",
    "hami.io/vgpu-node",
    "hami.io/bind-phase",
    "hami.io/vgpu-devices-to-allocate",
)


def _container(rng: random.Random, name: str) -> dict[str, Any]:
    limits = {r: _value(rng) for r in _RESOURCES if rng.random() < 0.6}
    container: dict[str, Any] = {"name": name, "image": "busybox", "resources": {"limits": limits}}
    if rng.random() < 0.1:
        container["securityContext"] = {"privileged": rng.random() < 0.5}
    if rng.random() < 0.1:
        container["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    return container


def _pod(rng: random.Random) -> dict[str, Any]:
    """A random pod as the fuzzer sends it: random containers and, sometimes, a policy or an
    annotation only the scheduler may write."""
    containers = [_container(rng, f"c{i}") for i in range(rng.choice((1, 1, 2, 3)))]
    annotations = {}
    if rng.random() < 0.3:
        annotations["hami.io/gpu-scheduler-policy"] = rng.choice(_POLICIES)
    if rng.random() < 0.05:
        annotations[rng.choice(_OWNED)] = "GPU-x,NVIDIA,1,0:;"
    return {
        "metadata": {
            "name": f"ghost-{rng.randrange(10**6)}",
            "namespace": "fuzz",
            "uid": str(uuid.UUID(int=rng.getrandbits(128))),
            "annotations": annotations,
        },
        "spec": {"containers": containers},
    }


def _mangle(rng: random.Random, doc: Any, depth: int = 0) -> Any:
    """One random field of `doc` replaced by a value of another type, or removed."""
    if not isinstance(doc, dict) or not doc or depth > 6:
        return rng.choice(_ODD_VALUES)
    key = rng.choice(list(doc))
    out = dict(doc)
    if rng.random() < 0.3:
        del out[key]
    elif rng.random() < 0.5:
        out[key] = rng.choice(_ODD_VALUES)
    else:
        out[key] = _mangle(rng, doc[key], depth + 1)
    return out


def _spoiled(rng: random.Random, doc: Any, *, mangled: float, noise: float) -> bytes:
    """`doc` as JSON; with probability `mangled` one field spoiled, `noise` not JSON at all."""
    roll = rng.random()
    if roll < mangled:
        return json.dumps(_mangle(rng, doc)).encode()
    if roll < mangled + noise:
        return rng.choice((b"", b"{", b"[]", b"null", b'"x"', rng.randbytes(64)))
    return json.dumps(doc).encode()


def review_bodies(seed: int, count: int) -> Iterator[bytes]:
    """AdmissionReviews as kube-apiserver sends them for Pod CREATE (and some it never sends)."""
    rng = random.Random(seed)
    for i in range(count):
        pod = _pod(rng)
        if rng.random() < 0.2:
            pod["spec"]["initContainers"] = [_container(rng, "init")]
        if rng.random() < 0.05:
            pod["metadata"]["labels"] = {"hami.io/webhook": "ignore"}
        doc: Any = {
            "apiVersion": rng.choice(("admission.k8s.io/v1", "admission.k8s.io/v1beta1")),
            "kind": "AdmissionReview",
            "request": {
                "uid": f"fuzz-{seed}-{i}",
                "kind": {"group": "", "version": "v1", "kind": rng.choice(("Pod", "Pod", "Node"))},
                "operation": rng.choice(("CREATE", "CREATE", "CREATE", "UPDATE", "DELETE")),
                "namespace": "fuzz",
                "dryRun": rng.random() < 0.5,
                "object": pod,
            },
        }
        yield _spoiled(rng, doc, mangled=0.3, noise=0.05)


def filter_bodies(seed: int, count: int, nodes: Sequence[str]) -> Iterator[bytes]:
    rng = random.Random(seed)
    for _ in range(count):
        names = (
            rng.sample(list(nodes), k=rng.randint(0, len(nodes)))
            + ["no-such-node"][: rng.randint(0, 1)]
        )
        yield _spoiled(rng, {"Pod": _pod(rng), "NodeNames": names}, mangled=0.25, noise=0.05)


def bind_bodies(seed: int, count: int, nodes: Sequence[str]) -> Iterator[bytes]:
    rng = random.Random(seed)
    for _ in range(count):
        doc: Any = {
            "PodName": f"ghost-{rng.randrange(10**6)}",
            "PodNamespace": rng.choice(("fuzz", "default", "kube-system")),
            "PodUID": str(uuid.UUID(int=rng.getrandbits(128))),
            "Node": rng.choice([*nodes, "no-such-node"]),
        }
        yield _spoiled(rng, doc, mangled=0.3, noise=0)
