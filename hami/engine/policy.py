"""Scheduling policies: what a pod's annotations and the defaults ask for.

GPU policies compose (HAMi v2.10 chains): `mutex` and `topology-aware` are
filters wherever they appear; `binpack`, `spread` and `numa` are sort keys
applied in the written order. Unlike HAMi, an unknown name is an error that
lists the valid ones: a typo silently turning into `spread` is the kind of
surprise a scheduler must not spring on its users.
"""

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from hami.engine import names, nvidianames
from hami.engine import reasons as r
from hami.engine.codec import split_list
from hami.engine.score import DEFAULT_WEIGHTS, Weights


class CardKey(StrEnum):
    """A GPU policy's sort keys, applied to the cards in the written order."""

    BINPACK = "binpack"  # the busiest card first
    SPREAD = "spread"  # the idlest card first
    NUMA = "numa"  # the NUMA node's cards together


class CardFilter(StrEnum):
    """A GPU policy's filters, wherever they appear in it."""

    MUTEX = "mutex"  # a whole card to itself
    TOPOLOGY_AWARE = "topology-aware"  # cards joined by NVLink


class NodePolicy(StrEnum):
    BINPACK = "binpack"  # the busiest node first
    SPREAD = "spread"  # the idlest node first


GPU_FILTERS = tuple(CardFilter)
GPU_SORT_KEYS = tuple(CardKey)
GPU_POLICY_NAMES = (*GPU_SORT_KEYS, *GPU_FILTERS)
NODE_POLICY_NAMES = tuple(NodePolicy)


class PolicyError(ValueError):
    """A policy or option annotation the scheduler cannot follow."""


@dataclass(frozen=True, slots=True)
class GpuPolicy:
    text: str
    chain: bool  # HAMi's chain mode: the value has a comma or is exactly "numa"
    mutex: bool
    topology: bool
    keys: tuple[CardKey, ...]  # sort keys, written order, no duplicates
    single: str  # the name in single mode ("" in chain mode)
    # The filters a card's own usage can fail (CARD_RULES): what every family's fit asks of
    # each card through `filtered_out`.
    card_filters: frozenset[CardFilter] = frozenset()


# Read with every filter and webhook call from a pod's annotation or the default, which a
# cluster sets to a handful of texts: each is parsed once (a text that is no policy raises
# every time; lru_cache keeps no exceptions).
@functools.lru_cache(maxsize=256)
def parse_gpu_policy(text: str) -> GpuPolicy:
    tokens = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in tokens):
        raise PolicyError(
            f"GPU scheduler policy {text!r} has an empty name; "
            f"valid names: {', '.join(GPU_POLICY_NAMES)}"
        )
    unknown = [t for t in tokens if t not in GPU_POLICY_NAMES]
    if unknown:
        raise PolicyError(
            f"unknown GPU scheduler policy {', '.join(map(repr, unknown))} in {text!r}; "
            f"valid names: {', '.join(GPU_POLICY_NAMES)} (filters may be combined with "
            f"sort keys, e.g. 'mutex,binpack')"
        )
    keys = tuple(dict.fromkeys(CardKey(t) for t in tokens if t in GPU_SORT_KEYS))
    chain = len(tokens) > 1 or tokens == ["numa"]
    return GpuPolicy(
        text=text,
        chain=chain,
        mutex=CardFilter.MUTEX in tokens,
        topology=CardFilter.TOPOLOGY_AWARE in tokens,
        keys=keys,
        single="" if chain else tokens[0],
        card_filters=frozenset(CardFilter(t) for t in tokens if t in CARD_RULES),
    )


# The card filters that turn a card away on its own usage, each with its rule (given the
# card's used slots) and HAMi's reason: the one step every family's fit and NVIDIA's checks
# ask, in HAMi's place for it (after the split count, before the room). A new such filter is
# its CardFilter name and its entry here; only a family with a rule of its own for it (Vastai's
# dies, Kunlunxin's counts) says more.
CARD_RULES: dict[CardFilter, tuple[Callable[[int], bool], str]] = {
    CardFilter.MUTEX: (lambda used: used > 0, r.EXCLUSIVE_CONFLICT),
}


def filtered_out(filters: frozenset[CardFilter], used: int) -> str | None:
    """Why a card with `used` slots taken fails one of the pod's card filters; None where it
    passes them all."""
    if not filters:  # most pods: asked of every card a decision walks
        return None
    for name, (fails, reason) in CARD_RULES.items():
        if name in filters and fails(used):
            return reason
    return None


def parse_node_policy(text: str) -> NodePolicy:
    try:
        return NodePolicy(text.strip())
    except ValueError:
        raise PolicyError(
            f"unknown node scheduler policy {text!r}; valid names: {', '.join(NODE_POLICY_NAMES)}"
        ) from None


def parse_weights(text: str) -> Weights:
    """`slot=<int>,core=<int>,memory=<int>`: all three, each once, >= 0, at least one > 0."""
    seen: dict[str, int] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in ("slot", "core", "memory") or key in seen:
            raise PolicyError(
                f"{names.SCORING_WEIGHTS} {text!r} must be 'slot=<int>,core=<int>,memory=<int>'"
            )
        try:
            seen[key] = int(value.strip())
        except ValueError:
            raise PolicyError(f"{names.SCORING_WEIGHTS}: {key} must be an integer") from None
        if seen[key] < 0:
            raise PolicyError(f"{names.SCORING_WEIGHTS}: {key} must not be negative")
    if len(seen) != 3 or not any(seen.values()):
        raise PolicyError(
            f"{names.SCORING_WEIGHTS} {text!r} needs slot, core and memory, at least one above 0"
        )
    return Weights(slot=seen["slot"], core=seen["core"], memory=seen["memory"])


def numa_bind_on(text: str | None) -> bool:
    """HAMi's reading of `nvidia.com/numa-bind`: true when Go's strconv.ParseBool says true;
    anything it cannot parse (`yes`) leaves NUMA binding off, and the pod is admitted."""
    return text in ("1", "t", "T", "TRUE", "true", "True")


@dataclass(frozen=True, slots=True)
class Defaults:
    """Cluster-wide policies (the scheduler's flags)."""

    gpu_policy: str = "spread"
    node_policy: str = "binpack"


@dataclass(frozen=True, slots=True)
class PodOptions:
    """Everything in a pod's annotations that steers placement, parsed once per decision."""

    gpu_policy: GpuPolicy
    node_policy: NodePolicy
    weights: Weights = DEFAULT_WEIGHTS
    # None: no `nvidia.com/use-gputype`; () when it names no type (`,`): no card matches.
    use_types: tuple[str, ...] | None = None
    nouse_types: tuple[str, ...] = ()
    use_uuids: frozenset[str] = frozenset()
    nouse_uuids: frozenset[str] = frozenset()
    numa_bind: bool = False
    # None: no `nvidia.com/vgpu-mode`; set, even empty, a card's mode must be part of it.
    vgpu_mode: str | None = None
    # The pod's annotations that other device families' fits read (hami.engine.asks); set
    # only for a pod asking some family.
    family_annotations: tuple[tuple[str, str], ...] = ()

    @property
    def selects_cards(self) -> bool:
        """Whether any type, UUID or mode selector narrows the cards (most pods have none)."""
        return bool(
            self.use_types is not None
            or self.nouse_types
            or self.use_uuids
            or self.nouse_uuids
            or self.vgpu_mode is not None
        )


def pod_options(annotations: Mapping[str, str], defaults: Defaults = Defaults()) -> PodOptions:
    """Parse the pod's placement annotations; the pod's policy replaces the default entirely."""
    weights = DEFAULT_WEIGHTS
    if names.SCORING_WEIGHTS in annotations:
        weights = parse_weights(annotations[names.SCORING_WEIGHTS])
    return PodOptions(
        gpu_policy=parse_gpu_policy(annotations.get(names.GPU_POLICY) or defaults.gpu_policy),
        node_policy=parse_node_policy(annotations.get(names.NODE_POLICY) or defaults.node_policy),
        weights=weights,
        use_types=_use_types(annotations.get(nvidianames.USE_GPUTYPE)),
        nouse_types=tuple(
            t.lower() for t in split_list(annotations.get(nvidianames.NOUSE_GPUTYPE))
        ),
        use_uuids=frozenset(split_list(annotations.get(nvidianames.USE_GPUUUID))),
        nouse_uuids=frozenset(split_list(annotations.get(nvidianames.NOUSE_GPUUUID))),
        numa_bind=numa_bind_on(annotations.get(nvidianames.NUMA_BIND)),
        vgpu_mode=annotations.get(nvidianames.VGPU_MODE),
    )


def _use_types(value: str | None) -> tuple[str, ...] | None:
    """As HAMi's CheckType: blank is no constraint; anything else is a list of model names,
    and one that names none (`,`) matches no card."""
    if value is None or not value.strip():
        return None
    return tuple(t.lower() for t in split_list(value))
