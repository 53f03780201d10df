"""`hami simulate`: replay a scenario through the admission rules and the extender's filter.

The same Placement service the extender uses decides; a successful decision
is bound the way bind would (the allocation annotations and spec.nodeName),
and the cache learns it through the same upsert a watch event would cause.
"""

import copy
import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from hami.cache.store import ClusterCache
from hami.engine.admission import AdmissionConfig, admit
from hami.engine.nvidianames import MIG_ALLOCATIONS
from hami.engine.policy import Defaults
from hami.engine.reasons import unschedulable_message
from hami.service.annotations import allocation_annotations, allocation_labels, written_cards
from hami.service.nodelock.table import NodeLocks
from hami.service.placement import Placement
from hami.service.status import lab_card
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

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])


class Parts(Protocol):
    """What a replay is built from: hami.runtime.choices.Choices, the run's choices (declared
    here, so that the composition root builds the replay's parts and the replay imports
    nothing above it)."""

    def locks(self) -> NodeLocks: ...

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
        # Reservations never expire in a replay: binds follow filters at once.
        self.cache = parts.cache(
            lambda: float(next(ticks)), locks=parts.locks(), reservation_ttl=float("inf")
        )
        self.cache.replace_nodes(self.scenario.nodes)
        self.placement = parts.placement(self.cache)
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
            verdict = admit(manifest, self.admission)
            if not verdict.allowed:
                denied.append((str(manifest["metadata"]["name"]), verdict.message))
                continue
            obj = copy.deepcopy(verdict.pod)
            meta = obj.setdefault("metadata", {})
            meta.setdefault("namespace", "default")
            meta["uid"] = str(
                uuid.uuid5(uuid.NAMESPACE_URL, f"{meta['namespace']}/{meta['name']}/{index}")
            )
            if meta["name"] not in self.pods:
                self.pods[meta["name"]] = _Pod(obj)
        log: list[str] = []
        for pod in self.pods.values():
            if not pod.obj.get("spec", {}).get("nodeName"):
                self._schedule(pod, log)
        return StepResult(
            index, step.label, self._results(), tuple(denied), tuple(log), self._claims()
        )

    def _claims(self) -> tuple[ClaimResult, ...]:
        return tuple(
            ClaimResult(namespace, name, node, tuple((u, c.usedmem, c.usedcores) for u, c in cards))
            for node in self.node_names
            for namespace, name, per_card in self.cache.dra.claims_on(node)
            for cards in (sorted(per_card.items()),)
        )

    def _schedule(self, pod: _Pod, log: list[str]) -> None:
        if pod.obj["spec"].get("schedulerName") != self.admission.scheduler_name:
            pod.pending_reason = "not a GPU pod: left to another scheduler"
            return
        outcome = self.placement.filter(pod.obj, self.node_names)
        if outcome.decision is not None:
            log.append(f"scheduling {outcome.pod}")
            log.extend(
                f"device {uuid} computer score is {score:f}"
                for cs in outcome.decision.scores
                for uuid, score in cs.items()
            )
        if outcome.error:
            pod.pending_reason = outcome.error
            return
        if (
            outcome.decision is None
            or outcome.decision.node is None
            or outcome.decision.devices is None
        ):
            pod.pending_reason = unschedulable_message(len(self.node_names), outcome.failed)
            return
        node = outcome.decision.node
        meta = pod.obj["metadata"]
        held = self.cache.reservation(str(meta.get("uid", "")))
        meta.setdefault("annotations", {}).update(
            allocation_annotations(
                node,
                outcome.decision.devices,
                SIMULATED_UNIX_TIME,
                families=self.cache.families,
                containers=held.containers if held is not None else (),
                cards=self.cache.family_cards(node),
            )
        )
        meta.setdefault("labels", {}).update(allocation_labels(node))
        pod.obj["spec"]["nodeName"] = node
        pod.pending_reason = None
        self.cache.upsert_pod(pod.obj)

    def _results(self) -> tuple[PodResult, ...]:
        out = []
        for name in sorted(self.pods):
            obj = self.pods[name].obj
            annotations = obj["metadata"].get("annotations") or {}
            out.append(
                PodResult(
                    name=name,
                    namespace=obj["metadata"]["namespace"],
                    node=obj["spec"].get("nodeName"),
                    allocated=written_cards(annotations, self.cache.families),
                    pending_reason=self.pods[name].pending_reason,
                    mig=annotations.get(MIG_ALLOCATIONS),
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
