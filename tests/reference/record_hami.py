"""Record HAMi v2.10's own scheduler answering each device family's scenario: test tooling.

    .venv/bin/python -m tests.reference.record_hami --scheduler /work/hami-bin/scheduler \
        --hami-src /work/hami-src [family ...]

HAMi is not on the Go module proxy, so CI cannot build its scheduler: the answers are recorded
once with a binary built from HAMi's source (`go build ./cmd/scheduler` at tag v2.10.0) and
committed under tests/reference/fixtures/hami_v210/<family>.json, inputs and answers together;
tests/unit/engine/families/test_hami_fixtures.py replays them against our engine.

What runs: the e2e tier's etcd and kube-apiserver on loopback (tests/e2e/cluster.py, nothing
else of it), then HAMi's scheduler against them with the device config its chart renders
(`helm template` of HAMi's charts/hami, so every family is enabled as a default install enables
it) and its extender on a loopback port. For each family the recorder creates the nodes as that
vendor's device plugin registers them (hami_family_scenarios), waits until HAMi has read them,
and replays the scenario: a pod is created (no scheduler ever binds it), HAMi's /filter is called
as kube-scheduler calls it (ExtenderArgs with NodeNames), and its answer and the annotations its
filter wrote on the pod are recorded; /bind, and a pod's deletion, are steps too.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from hami.engine import jsonpatch
from tests.e2e.cluster import ControlPlane, Process, ensure_binaries, free_ports
from tests.reference.hami_family_scenarios import (
    HAMI_VERSION,
    NAMESPACE,
    SCENARIOS,
    Scenario,
    pod_manifest,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hami_v210"
# Annotations whose value is a clock reading (hami.io/vgpu-time, hami.io/bind-time,
# mthreads.com/predicate-time, NEURON_ALLOC_TIME...): recorded as this marker, never compared.
CLOCK = "<time>"
REGISTERED = "Node device added"
SUCCESS = re.compile(r"nodes fit\((.*)\)$")


class HamiPlane(ControlPlane):
    """etcd and kube-apiserver of the e2e tier, with HAMi's scheduler instead of ours."""

    def __init__(self, bin_dir: Path, scheduler: Path, device_config: str) -> None:
        super().__init__(bin_dir)
        self.hami_binary = scheduler
        self.device_config = self.run_dir / "device-config.yaml"
        self.device_config.write_text(device_config)
        self.hami_port, self.hami_metrics_port = free_ports(2)
        self.hami_url = f"http://127.0.0.1:{self.hami_port}"
        self.hami: Process | None = None
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        context.load_cert_chain(self.pki / "admin.crt", self.pki / "admin.key")
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )

    def _start(self) -> None:
        self._timed("etcd", self._start_etcd)
        self._timed("kube-apiserver", self._start_apiserver)
        self._timed("hami v2.10 scheduler", self._start_hami)

    def _start_hami(self) -> None:
        argv = [
            str(self.hami_binary),
            f"--http_bind=127.0.0.1:{self.hami_port}",
            f"--metrics-bind-address=127.0.0.1:{self.hami_metrics_port}",
            f"--device-config-file={self.device_config}",
            "--scheduler-name=hami-scheduler",
            "--node-scheduler-policy=binpack",
            "--gpu-scheduler-policy=spread",
            # The chart passes these when devices.ascend/iluvatar.enabled; without them HAMi
            # registers neither family whatever device-config.yaml says.
            "--enable-ascend=true",
            "--enable-iluvatar=true",
        ]
        env = {**self.env, "KUBECONFIG": str(self.scheduler_kubeconfig), "POD_NAMESPACE": "hami"}
        self.hami = self.spawn("hami-v210-scheduler", argv, env=env)
        self.wait_http(self.hami, f"{self.hami_url}/healthz", None, timeout=60)

    def close(self) -> None:
        if self.hami is not None:
            self.hami.stop()
        super().close()

    # --- the API, as admin, without a kubectl per call ---------------------------------------

    def api(self, method: str, path: str, body: Any = None, patch: bool = False) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.apiserver_url + path, data=data, method=method)
        kind = "application/merge-patch+json" if patch else "application/json"
        request.add_header("Content-Type", kind)
        try:
            with self._opener.open(request, timeout=30) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{method} {path}: HTTP {e.code} {e.read().decode()}") from e

    def hami_post(self, route: str, body: Mapping[str, Any]) -> Any:
        request = urllib.request.Request(
            f"{self.hami_url}{route}", data=json.dumps(body).encode(), method="POST"
        )
        request.add_header("Content-Type", "application/json")
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            request, timeout=60
        ) as response:
            return json.loads(response.read())


def chart_device_config(helm: Path, hami_src: Path) -> str:
    """device-config.yaml as HAMi's chart renders it with its default values."""
    rendered = subprocess.run(
        [
            str(helm),
            "template",
            "hami",
            str(hami_src / "charts" / "hami"),
            "--show-only",
            "templates/scheduler/device-configmap.yaml",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    text: str = yaml.safe_load(rendered)["data"]["device-config.yaml"]
    return text


def _scrub(annotations: Mapping[str, str]) -> dict[str, str]:
    return {k: (CLOCK if k.lower().endswith("time") else v) for k, v in sorted(annotations.items())}


def _wait_registered(plane: HamiPlane, nodes: Sequence[str], timeout: float = 60) -> None:
    """Until HAMi's log says it read every node's cards (it reads a node when it is added)."""
    assert plane.hami is not None
    deadline = time.monotonic() + timeout
    while True:
        log = plane.hami.log.read_text(errors="replace")
        added = [line for line in log.splitlines() if REGISTERED in line]
        missing = [n for n in nodes if not any(f'nodeName="{n}"' in line for line in added)]
        if not missing:
            # A node with two families is read in one pass; let that pass finish.
            time.sleep(2)
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"HAMi never registered {missing}; see {plane.hami.log}")
        time.sleep(0.5)


def record(plane: HamiPlane, scenario: Scenario) -> dict[str, Any]:
    """Create the scenario's nodes, replay its steps against HAMi, return the fixture."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    nodes = []
    for spec in scenario.nodes:
        annotations = {k: v.replace("{now}", stamp) for k, v in spec.annotations.items()}
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": spec.name, "annotations": annotations, "labels": spec.labels},
        }
        plane.api("POST", "/api/v1/nodes", body)
        status = {
            "status": {"allocatable": dict(spec.allocatable), "capacity": dict(spec.allocatable)}
        }
        plane.api("PATCH", f"/api/v1/nodes/{spec.name}/status", status, patch=True)
        nodes.append(
            {
                "name": spec.name,
                "annotations": annotations,
                "labels": dict(spec.labels),
                "allocatable": dict(spec.allocatable),
            }
        )
    _wait_registered(plane, [n.name for n in scenario.nodes])
    all_nodes = [n.name for n in scenario.nodes]
    pods: dict[str, dict[str, Any]] = {}
    steps = []
    for step in scenario.steps:
        entry: dict[str, Any] = {"op": step.op, "pod": step.pod}
        if step.note:
            entry["note"] = step.note
        if step.op == "filter":
            manifest = pod_manifest(step)
            admitted, verdict = _admit(plane, manifest)
            entry.update(
                containers=_asks(admitted["spec"]["containers"]),
                init_containers=_asks(admitted["spec"].get("initContainers", [])),
                annotations=dict(admitted["metadata"].get("annotations") or {}),
                webhook=verdict,
            )
            if not verdict["allowed"]:
                steps.append(entry)
                continue
            pod = plane.api("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", admitted)
            pods[step.pod] = pod
            candidates = [n.replace("{first}", all_nodes[0]) for n in step.nodes] or all_nodes
            answer = plane.hami_post(
                "/filter", {"Pod": pod, "Nodes": None, "NodeNames": candidates}
            )
            after = plane.api("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{step.pod}")
            written = {
                k: v
                for k, v in (after["metadata"].get("annotations") or {}).items()
                if entry["annotations"].get(k) != v
            }
            chosen = answer.get("NodeNames") or answer.get("nodenames")
            entry.update(
                node_names=candidates,
                hami={
                    "node_names": chosen,
                    "failed_nodes": answer.get("FailedNodes") or answer.get("failedNodes") or {},
                    "error": answer.get("Error") or answer.get("error") or "",
                    "annotations": _scrub(written),
                    "node_scores": (
                        _node_scores(plane, step.pod, pod["metadata"]["uid"]) if chosen else {}
                    ),
                },
            )
        elif step.op == "bind":
            pod = plane.api("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{step.pod}")
            node = pod["metadata"]["annotations"]["hami.io/vgpu-node"]
            answer = plane.hami_post(
                "/bind",
                {
                    "PodName": step.pod,
                    "PodNamespace": NAMESPACE,
                    "PodUID": pod["metadata"]["uid"],
                    "Node": node,
                },
            )
            after = plane.api("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{step.pod}")
            lock = plane.api("GET", f"/api/v1/nodes/{node}")["metadata"].get("annotations", {})
            entry.update(
                node=node,
                hami={
                    "error": answer.get("Error") or answer.get("error") or "",
                    "annotations": _scrub(after["metadata"].get("annotations") or {}),
                    "node_lock": sorted(k for k in lock if "lock" in k),
                },
            )
            # The device plugin's Allocate: the pod got its cards, the node lock goes.
            plane.api(
                "PATCH",
                f"/api/v1/namespaces/{NAMESPACE}/pods/{step.pod}",
                {"metadata": {"annotations": {"hami.io/bind-phase": "success"}}},
                patch=True,
            )
            unlock = {k: None for k in lock if "lock" in k}
            if unlock:
                plane.api(
                    "PATCH",
                    f"/api/v1/nodes/{node}",
                    {"metadata": {"annotations": unlock}},
                    patch=True,
                )
        elif step.op == "delete":
            plane.api(
                "DELETE",
                f"/api/v1/namespaces/{NAMESPACE}/pods/{step.pod}",
                {"gracePeriodSeconds": 0},
            )
            _wait_gone(plane, step.pod)
            # HAMi forgets the pod on its informer's delete event; give it that event.
            time.sleep(2)
        else:
            raise ValueError(f"unknown step {step.op}")
        steps.append(entry)
    for name in pods:
        _delete_quietly(plane, f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
    for spec in scenario.nodes:
        _delete_quietly(plane, f"/api/v1/nodes/{spec.name}")
    return {
        "hami": HAMI_VERSION,
        "family": scenario.family,
        "families": list(scenario.types),
        "recorded_with": "tests/reference/record_hami.py",
        "description": scenario.description,
        "namespace": NAMESPACE,
        "nodes": nodes,
        "steps": steps,
    }


def _node_scores(plane: HamiPlane, pod: str, uid: str, timeout: float = 10) -> dict[str, float]:
    """The score of every node that fitted, from the event HAMi's filter records on the pod
    (`find fit node(X), N nodes not fit, M nodes fit(a:1.00,b:2.00)`): where nodes tie, HAMi
    picks one at random, and a replay needs to know that it did."""
    deadline = time.monotonic() + timeout
    while True:
        events = plane.api(
            "GET",
            f"/api/v1/namespaces/{NAMESPACE}/events?fieldSelector=involvedObject.uid%3D{uid}",
        )
        for event in events["items"]:
            match = SUCCESS.search(event.get("message", ""))
            if match:
                pairs = (p.rsplit(":", 1) for p in match.group(1).split(",") if p)
                return {node: float(score) for node, score in pairs}
        if time.monotonic() > deadline:
            raise RuntimeError(f"HAMi recorded no FilteringSucceed event on {pod}")
        time.sleep(0.2)


def _admit(plane: HamiPlane, manifest: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod as HAMi's own webhook (its /webhook route) lets it in, and the webhook's verdict.

    HAMi's webhook rewrites some families' asks (Ascend rounds memory up to a template,
    Iluvatar sets cores for several cards...), so the filter must see the pod it rewrote."""
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-0000-0000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": NAMESPACE,
            "operation": "CREATE",
            "object": manifest,
            "userInfo": {"username": "admin"},
        },
    }
    response = plane.hami_post("/webhook", review)["response"]
    patch = json.loads(base64.b64decode(response["patch"])) if response.get("patch") else []
    verdict: dict[str, Any] = {"allowed": bool(response.get("allowed")), "patch": patch}
    message = (response.get("status") or {}).get("message", "")
    if message:
        verdict["message"] = message
    return jsonpatch.apply(manifest, patch), verdict


def _asks(containers: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each container's name and resources, as the filter saw them."""
    out = []
    for c in containers:
        resources = c.get("resources") or {}
        ask: dict[str, Any] = {"name": c["name"], "limits": dict(resources.get("limits") or {})}
        if resources.get("requests"):
            ask["requests"] = dict(resources["requests"])
        out.append(ask)
    return out


def _wait_gone(plane: HamiPlane, pod: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            plane.api("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}")
        except RuntimeError as e:
            if "HTTP 404" in str(e):
                return
            raise
        time.sleep(0.3)
    raise RuntimeError(f"pod {pod} was not deleted within {timeout}s")


def _delete_quietly(plane: HamiPlane, path: str) -> None:
    try:
        plane.api("DELETE", path, {"gracePeriodSeconds": 0})
    except RuntimeError as e:
        if "HTTP 404" not in str(e):
            raise


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scheduler", type=Path, default=Path("/work/hami-bin/scheduler"))
    parser.add_argument("--hami-src", type=Path, default=Path("/work/hami-src"))
    parser.add_argument("families", nargs="*", help="scenario names (default: all)")
    args = parser.parse_args(argv)
    chosen = [s for s in SCENARIOS if not args.families or s.family in args.families]
    bin_dir = ensure_binaries()
    config = chart_device_config(bin_dir / "helm", args.hami_src)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    plane = HamiPlane(bin_dir, args.scheduler, config)
    with plane:
        plane.api(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        )
        for scenario in chosen:
            fixture = record(plane, scenario)
            path = FIXTURES / f"{scenario.family}.json"
            path.write_text(json.dumps(fixture, indent=1, sort_keys=False) + "\n")
            print(f"{scenario.family}: {len(fixture['steps'])} steps -> {path}", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    sys.exit(main())
