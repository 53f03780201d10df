"""Real GPU pod templates written by others (tests/corpus) through the admission service.

Each is reviewed as written and with HAMi's gpumem/gpucores added to its GPU containers, with
HAMi's device plugin and with standalone injection. Targets: no false refusal (every admitted
spec is admitted, every refusal names the way out recorded for it) and no way out admitted (a
pod admitted leaves with every GPU-less container pinned to no card and every GPU container to
the slice's driver capabilities, and passes the checks again as stored).
"""

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami.engine.admission import AdmissionConfig
from hami.engine.claims import NO_CLAIMS, ClaimSources
from hami.engine.escapes import pod_escapes
from hami.engine.injection import CONFIG_ANNOTATION, InjectionConfig
from hami.engine.jsonpatch import apply
from hami.engine.requests import ResourceNames, asks_gpu
from hami.runtime.config import Settings, device_classes
from hami.service.admission import AdmissionService
from tests.builders import FAMILIES

CORPUS = Path(__file__).parents[1] / "corpus"
INDEX: list[dict[str, Any]] = yaml.safe_load((CORPUS / "index.yaml").read_text())["pods"]
# The GPU DeviceClasses refused as `hami serve` refuses them by default (with the DRA
# bookkeeping on, the classes it counts are admitted).
CLASSES = device_classes(Settings(), FAMILIES)
MODES = {
    "hami-device-plugin": AdmissionConfig(families=FAMILIES, gpu_device_classes=CLASSES),
    "standalone": AdmissionConfig(
        injection=InjectionConfig(mode="standalone"), families=FAMILIES, gpu_device_classes=CLASSES
    ),
}
NAMES = ResourceNames()


def corpus_pod(name: str) -> dict[str, Any]:
    pod: dict[str, Any] = yaml.safe_load((CORPUS / "pods" / f"{name}.yaml").read_text())
    return pod


def sliced(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as a HAMi user would write it: a slice of each card its containers ask for."""
    out = copy.deepcopy(pod)
    for c in [*(out["spec"].get("initContainers") or ()), *out["spec"]["containers"]]:
        limits = (c.get("resources") or {}).get("limits") or {}
        if NAMES.gpu in limits and NAMES.memory not in limits:
            limits.update({NAMES.memory: 4000, NAMES.cores: 50})
    return out


def claims(entry: dict[str, Any]) -> ClaimSources:
    """The DRA claims and templates the entry's source file creates beside the pod."""
    return {(c["kind"], c["metadata"]["name"]): c for c in entry.get("claims", ())}


def review(
    pod: dict[str, Any], cfg: AdmissionConfig, read: ClaimSources = NO_CLAIMS
) -> tuple[bool, str, dict[str, Any]]:
    request = {
        "uid": "corpus",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "namespace": "team",
        "object": pod,
    }
    outcome = AdmissionService(cfg).review(request, read)
    stored = apply(copy.deepcopy(pod), outcome.patch) if outcome.allowed else {}
    return outcome.allowed, outcome.message, stored


def expected(entry: dict[str, Any], mode: str) -> str:
    return str(entry.get(mode, entry["verdict"]) if mode == "standalone" else entry["verdict"])


@pytest.mark.parametrize("as_sliced", [False, True], ids=["as-written", "with-gpumem"])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("entry", INDEX, ids=[e["name"] for e in INDEX])
def test_each_corpus_pod_gets_the_verdict_recorded_for_it(
    entry: dict[str, Any], mode: str, as_sliced: bool
) -> None:
    pod = corpus_pod(entry["name"])
    pod = sliced(pod) if as_sliced else pod
    allowed, message, stored = review(pod, MODES[mode], claims(entry))
    if expected(entry, mode) == "refused":
        assert not allowed, f"{entry['name']} admitted: {entry['why']}"
        for says in entry["says"]:
            assert says in message, message
        return
    assert allowed, f"{entry['name']} refused: {message}"
    spec = stored["spec"]
    for c in [*(spec.get("initContainers") or ()), *spec["containers"]]:
        env = {e["name"]: e for e in c.get("env") or ()}
        if asks_gpu(c, NAMES):
            assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] in ("compute,utility", "compute")
        else:
            assert env["NVIDIA_VISIBLE_DEVICES"]["value"] in ("none", "void"), c["name"]
    config = (stored["metadata"].get("annotations") or {}).get(CONFIG_ANNOTATION, "")
    assert pod_escapes(stored, stored, injected_config=config) == [], "it passes them again"


def test_the_corpus_records_where_each_spec_comes_from_and_why() -> None:
    names = [e["name"] for e in INDEX]
    assert len(names) == len(set(names)) >= 40
    assert sorted(p.stem for p in (CORPUS / "pods").glob("*.yaml")) == sorted(names)
    projects = {e["repo"] for e in INDEX}
    assert len(projects) >= 12, projects
    for e in INDEX:
        assert e["repo"] and e["path"] and e["commit"] and e["why"], e["name"]
        assert e["verdict"] in ("admitted", "refused"), e["name"]
        assert (e["verdict"] == "refused") is bool(e.get("says")), e["name"]
        header = (CORPUS / "pods" / f"{e['name']}.yaml").read_text().splitlines()[0]
        assert e["path"] in header, "each spec names its source beside it"


def test_the_refusals_are_the_ones_recorded() -> None:
    """5 of 44 with HAMi's device plugin, 4 with standalone injection; each for a way out (NVIDIA's
    DRA demo with a slice added is admitted while the DRA bookkeeping counts its claim)."""
    refused = {m: [e["name"] for e in INDEX if expected(e, m) == "refused"] for m in MODES}
    assert sorted(refused["hami-device-plugin"]) == [
        "gke-rdma-nccl-test",
        "gke-tcpx-nccl-test",
        "gke-tcpx-unprivileged",
        "gke-tcpxo-unprivileged",
        "vllm-chart-configs-and-secrets",
    ]
    assert "vllm-chart-configs-and-secrets" not in refused["standalone"]


UPDATED = [e for e in INDEX if "update" in e]


@pytest.mark.parametrize("sub", ["", "status"])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("entry", UPDATED, ids=[e["name"] for e in UPDATED])
def test_an_update_of_a_stored_corpus_pod_gets_the_verdict_recorded_for_it(
    entry: dict[str, Any], mode: str, sub: str
) -> None:
    """The pod as admission stored it, then updated with the annotations of the corpus pod
    named in `from` (a PATCH of the pod, or of its status), is judged as at creation."""
    update = entry["update"]
    allowed, message, stored = review(corpus_pod(entry["name"]), MODES[mode])
    assert allowed, message
    added = copy.deepcopy(stored)
    source = corpus_pod(update["from"])["metadata"]["annotations"]
    added["metadata"].setdefault("annotations", {}).update(source)
    request = {
        "uid": "corpus",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "UPDATE",
        "subResource": sub,
        "namespace": "team",
        "object": added,
        "oldObject": stored,
    }
    outcome = AdmissionService(MODES[mode]).review(request)
    assert update["verdict"] == "refused" and not outcome.allowed, outcome
    assert outcome.message.startswith("GPU pod refused: "), "that one reason alone"
    for says in update["says"]:
        assert says in outcome.message, outcome.message
    # The pod as stored, in either node integration, passes an update that adds no way out.
    labelled = copy.deepcopy(stored)
    labelled["metadata"]["labels"] = {"team": "a"}
    assert AdmissionService(MODES[mode]).review({**request, "object": labelled}).allowed


def test_without_the_dra_bookkeeping_nvidias_dra_demo_is_refused() -> None:
    """--dra-bookkeeping=false: the claim's two cards would be counted nowhere."""
    (entry,) = [e for e in INDEX if e["name"] == "nvidia-dra-gpu-test-count"]
    blind = device_classes(Settings(dra_bookkeeping=False), FAMILIES)
    allowed, message, _ = review(
        corpus_pod(entry["name"]),
        AdmissionConfig(families=FAMILIES, gpu_device_classes=blind),
        claims(entry),
    )
    assert not allowed
    assert "ResourceClaimTemplate double-gpu, which asks DeviceClass gpu.nvidia.com" in message
