"""`hami simulate`: replay a scenario through the admission rules and the extender's filter.

The same Placement service the extender uses decides; a successful decision
is bound the way bind would (the allocation annotations and spec.nodeName),
and the cache learns it through the same upsert a watch event would cause.
A pod the webhook's DRA mode gated is placed as the leader's DRA placer places it (the same
decision over the DRA view, the same pinned claims), its claims allocated as kube-scheduler
would (hami.sim.dra) and counted by the bookkeeper.
"""

import copy
import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from hami.cache.store import ClusterCache
from hami.engine.admission import AdmissionConfig
from hami.engine.dra.claimspec import SelectorError, UnpublishedCardError
from hami.engine.dra.config import DraConfig
from hami.engine.dra.translate import GATE, TranslateError, pinned_claims, restore
from hami.engine.jsonpatch import apply
from hami.engine.model import PodDevices
from hami.engine.nvidianames import MIG_ALLOCATIONS
from hami.engine.policy import Defaults
from hami.engine.reasons import unschedulable_message
from hami.engine.requests import RequestError
from hami.service.admission import AdmissionService
from hami.service.annotations import allocation_annotations, allocation_labels, written_cards
from hami.service.draplacer import decide, gated
from hami.service.nodelock.table import NodeLocks
from hami.service.placement import FilterOutcome, Placement
from hami.service.status import lab_card
from hami.sim.dra import UnpublishedError, allocated
from hami.sim.scenario import Scenario, Step

# Fixed so that replays are byte-identical; the value only reaches vgpu-time/bind-time.
SIMULATED_UNIX_TIME = 1_755_515_611


@dataclass(frozen=True)
class PodResult:
    name: str
    namespace: str
    node: str | None
    allocated: str | None
    pending_reason: str | None
    mig: str | None = None  # hami.io/vgpu-mig-allocations
    claims: tuple[str, ...] = ()  # a DRA pod's claims, as the placer made them


@dataclass(frozen=True)
class ClaimResult:
    """An allocated ResourceClaim as the bookkeeper counts it: per card, MiB and cores."""

    namespace: str
    name: str
    node: str
    cards: tuple[tuple[str, int, int], ...]  # (uuid, memory MiB, cores)


@dataclass(frozen=True)
class StepResult:
    index: int
    label: str
    pods: tuple[PodResult, ...]
    denied: tuple[tuple[str, str], ...] = ()  # (pod, message)
    score_log: tuple[str, ...] = ()
    claims: tuple[ClaimResult, ...] = ()


@dataclass
class _Pod:
    obj: dict[str, Any]
    pending_reason: str | None = None
    # A DRA pod: its claims, and its cards as a device-plugin pod's annotations would list them.
    claims: tuple[dict[str, Any], ...] = ()
    cards: str | None = None

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])


class Parts(Protocol):
    """What a replay is built from: hami.runtime.choices.Choices, the run's choices (declared
    here, so that the composition root builds the replay's parts and the replay imports
    nothing above it)."""

    def locks(self) -> NodeLocks: ...

    def dra(self, mode: str) -> DraConfig: ...

    def cache(
        self, clock: Callable[[], float], *, locks: NodeLocks, reservation_ttl: float
    ) -> ClusterCache: ...

    def placement(self, cache: ClusterCache) -> Placement: ...

    def admission(self) -> AdmissionConfig: ...

    def with_policies(self, policies: Defaults) -> "Parts": ...


@dataclass
class Simulation:
    """The scenario replayed with `parts`, the run's choices (its families above all); the
    scenario's defaults are its policies, as serve's flags are serve's."""

    scenario: Scenario
    parts: Parts

    def __post_init__(self) -> None:
        ticks = itertools.count()
        parts = self.parts.with_policies(self.scenario.defaults)
        self.admission = parts.admission()
        self.dra = parts.dra(self.scenario.dra_mode)
        self.webhook = AdmissionService(self.admission, dra=self.dra)
        # Reservations never expire in a replay: binds follow filters at once.
        self.cache = parts.cache(
            lambda: float(next(ticks)), locks=parts.locks(), reservation_ttl=float("inf")
        )
        self.cache.replace_nodes(self.scenario.nodes)
        self.placement = parts.placement(self.cache)
        self.over_dra = self.placement.over_dra()
        self.node_names = [n["metadata"]["name"] for n in self.scenario.nodes]
        self.pods: dict[str, _Pod] = {}
        self.claims: dict[str, dict[str, Any]] = {}

    def run(self) -> list[StepResult]:
        return [self._step(step) for step in self.scenario.steps]

    def _step(self, step: Step) -> StepResult:
        index, denied = step.index, []
        for name in step.delete:
            pod = self.pods.pop(name, None)
            if pod is not None:
                self.cache.delete_pod(pod.obj)
                for owned in pod.claims:  # the garbage collector's part: they go with the pod
                    self.claims.pop(owned["metadata"]["name"], None)
                    self.cache.dra.delete_claim(owned)
            claim = self.claims.pop(name, None)
            if claim is not None:
                self.cache.dra.delete_claim(claim)
        for obj in step.dra:
            if obj["kind"] == "ResourceSlice":
                self.cache.dra.upsert_slice(obj)
            else:
                self.claims[obj["metadata"]["name"]] = obj
                self.cache.dra.upsert_claim(obj)
        for manifest in step.apply:
            name = str(manifest["metadata"]["name"])
            namespace = str(manifest["metadata"].get("namespace") or "default")
            review = {
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"review/{namespace}/{name}/{index}")),
                "kind": {"kind": "Pod"},
                "namespace": namespace,
                "operation": "CREATE",
                "object": manifest,
            }
            verdict = self.webhook.review(review)
            if not verdict.allowed:
                denied.append((name, verdict.message))
                continue
            obj = apply(copy.deepcopy(manifest), verdict.patch)
            meta = obj.setdefault("metadata", {})
            meta.setdefault("namespace", "default")
            meta["uid"] = str(
                uuid.uuid5(uuid.NAMESPACE_URL, f"{meta['namespace']}/{meta['name']}/{index}")
            )
            if meta["name"] not in self.pods:
                self.pods[meta["name"]] = _Pod(obj)
        log: list[str] = []
        for pod in self.pods.values():
            if gated(pod.obj):
                self._place_dra(pod, log)
            elif not pod.obj.get("spec", {}).get("nodeName"):
                self._schedule(pod, log)
        return StepResult(
            index, step.label, self._results(), tuple(denied), tuple(log), self._claims()
        )

    def _claims(self) -> tuple[ClaimResult, ...]:
        return tuple(
            ClaimResult(namespace, name, node, tuple((u, c.usedmem, c.usedcores) for u, c in cards))
            for node in sorted({*self.node_names, *self.cache.dra.nodes()})
            for namespace, name, per_card in self.cache.dra.claims_on(node)
            for cards in (sorted(per_card.items()),)
        )

    def _decided(
        self, pod: _Pod, outcome: FilterOutcome, candidates: int, log: list[str]
    ) -> tuple[str, PodDevices] | None:
        """The node and cards the filter chose, logged; None with the pod's pending reason."""
        if outcome.decision is not None:
            log.append(f"scheduling {outcome.pod}")
            log.extend(
                f"device {uuid} computer score is {score:f}"
                for cs in outcome.decision.scores
                for uuid, score in cs.items()
            )
        if outcome.error:
            pod.pending_reason = outcome.error
            return None
        decision = outcome.decision
        if decision is None or decision.node is None or decision.devices is None:
            pod.pending_reason = unschedulable_message(candidates, outcome.failed)
            return None
        pod.pending_reason = None
        return decision.node, decision.devices

    def _annotations(self, node: str, devices: PodDevices, uid: str) -> dict[str, str]:
        held = self.cache.reservation(uid)
        return allocation_annotations(
            node,
            devices,
            SIMULATED_UNIX_TIME,
            families=self.cache.families,
            containers=held.containers if held is not None else (),
            cards=self.cache.family_cards(node),
        )

    def _schedule(self, pod: _Pod, log: list[str]) -> None:
        if pod.obj["spec"].get("schedulerName") != self.admission.scheduler_name:
            pod.pending_reason = "not a GPU pod: left to another scheduler"
            return
        outcome = self.placement.filter(pod.obj, self.node_names)
        decided = self._decided(pod, outcome, len(self.node_names), log)
        if decided is None:
            return
        node, devices = decided
        meta = pod.obj["metadata"]
        meta.setdefault("annotations", {}).update(
            self._annotations(node, devices, str(meta.get("uid", "")))
        )
        meta.setdefault("labels", {}).update(allocation_labels(node))
        pod.obj["spec"]["nodeName"] = node
        self.cache.upsert_pod(pod.obj)

    def _place_dra(self, pod: _Pod, log: list[str]) -> None:
        """As the DRA placer places a gated pod (hami.service.draplacer), then kube-scheduler
        allocates its pinned claims and binds it: the claims counted, the pod on the node."""
        nodes = self.cache.dra.nodes()
        outcome = decide(self.over_dra, restore(pod.obj), nodes, self.dra)
        decided = self._decided(pod, outcome, len(nodes), log)
        if decided is None:
            return
        node, devices = decided
        meta = pod.obj["metadata"]
        cards = written_cards(
            self._annotations(node, devices, str(meta["uid"])), self.cache.families
        )
        dra, resources = self.dra, self.admission.resources
        try:
            units = self.cache.dra.compute_units(node)
            made = pinned_claims(pod.obj, devices, dra, resources, self.cache.families, units)
            published = self.cache.dra.devices(node)
            claims = tuple(
                allocated(c, published, f"{meta['uid']}/{c['metadata']['name']}") for c in made
            )
        except (
            TranslateError,
            RequestError,
            SelectorError,
            UnpublishedError,
            UnpublishedCardError,
        ) as e:
            self.cache.forget(str(meta["uid"]))
            pod.pending_reason = f"DRA mode: {e}"
            return
        for claim in claims:
            self.claims[claim["metadata"]["name"]] = claim
            self.cache.dra.upsert_claim(claim)
        pod.claims, pod.cards = claims, cards
        spec = pod.obj["spec"]
        spec["schedulingGates"] = [
            g for g in spec.get("schedulingGates") or () if g["name"] != GATE
        ]
        spec["nodeName"] = node
        self.cache.upsert_pod(pod.obj)

    def _results(self) -> tuple[PodResult, ...]:
        out = []
        for name in sorted(self.pods):
            obj = self.pods[name].obj
            annotations = obj["metadata"].get("annotations") or {}
            pod = self.pods[name]
            out.append(
                PodResult(
                    name=name,
                    namespace=obj["metadata"]["namespace"],
                    node=obj["spec"].get("nodeName"),
                    allocated=pod.cards or written_cards(annotations, self.cache.families),
                    pending_reason=pod.pending_reason,
                    mig=annotations.get(MIG_ALLOCATIONS),
                    claims=tuple(c["metadata"]["name"] for c in pod.claims),
                )
            )
        return tuple(out)


def unexpected(scenario: Scenario, results: list[StepResult]) -> list[str]:
    """How the replay went other than the scenario says: a pod refused that its step does not
    expect to be, or one expected to be refused and admitted."""
    out = []
    for step, result in zip(scenario.steps, results, strict=True):
        denied = {pod for pod, _ in result.denied}
        expected = set(step.expect_denied)
        out += [f"step {step.index + 1} refused pod {p}" for p in sorted(denied - expected)]
        out += [
            f"step {step.index + 1} admitted pod {p}, which its expect.denied names"
            for p in sorted(expected - denied)
        ]
    return out


def render_text(results: list[StepResult], verbose: bool) -> str:
    """Each step as the lab's `lab-card` helper prints it (kubectl custom-columns, no headers)."""
    lines: list[str] = []
    for step in results:
        lines.append(f"== step {step.index + 1}: {step.label}")
        if verbose:
            lines.extend(step.score_log)
        for pod, message in step.denied:
            lines.append(
                f'Error from server: admission webhook "vgpu.hami.io" denied the request: {message} (pod {pod})'
            )
        lines.extend(
            lab_card([(p.name, p.allocated) for p in step.pods], [p.mig for p in step.pods])
        )
        lines.extend(
            f"{p.name} is Pending: {p.pending_reason}" for p in step.pods if p.pending_reason
        )
        lines.extend(
            f"claim {c.namespace}/{c.name} on {c.node}: {uuid} {memory} MiB, {cores} cores"
            for c in step.claims
            for uuid, memory, cores in c.cards
        )
        lines.append("")
    return "\n".join(lines)


def render_json(results: list[StepResult]) -> dict[str, Any]:
    return {
        "steps": [
            {
                "index": step.index,
                "pods": [
                    {
                        "name": p.name,
                        "namespace": p.namespace,
                        "node": p.node,
                        "allocated": p.allocated,
                        "mig_allocations": p.mig,
                        "pending_reason": p.pending_reason,
                        **({"claims": list(p.claims)} if p.claims else {}),
                    }
                    for p in step.pods
                ],
                **({"claims": [_claim_json(c) for c in step.claims]} if step.claims else {}),
            }
            for step in results
        ]
    }


def _claim_json(c: ClaimResult) -> dict[str, Any]:
    return {
        "namespace": c.namespace,
        "name": c.name,
        "node": c.node,
        "cards": [{"uuid": u, "memory_mib": m, "cores": k} for u, m, k in c.cards],
    }
