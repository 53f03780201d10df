"""Scenario files for `hami simulate`: nodes as the device plugin registers them, then steps."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hami.engine import nvidianames as nv
from hami.engine.codec import CodecError, decode_profiles, encode_node_devices
from hami.engine.dra.config import MODES
from hami.engine.families.registry import Families, enabling_flag
from hami.engine.inventory import family_cards, node_inventory
from hami.engine.model import DeviceInfo, Unregistered
from hami.engine.nvidianames import NVIDIA
from hami.engine.policy import Defaults, PolicyError, parse_gpu_policy, parse_node_policy
from hami.files import UnreadableFileError, read_text


class ScenarioError(ValueError):
    """A scenario file that cannot be run; the message names the file, the step and the problem."""


@dataclass(frozen=True)
class Step:
    index: int
    label: str
    apply: tuple[dict[str, Any], ...] = ()
    delete: tuple[str, ...] = ()
    # Pods the step expects admission to refuse: any other refusal makes the replay fail.
    expect_denied: tuple[str, ...] = ()
    # ResourceSlices and allocated ResourceClaims, in the order given (before the step's pods).
    dra: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Scenario:
    path: Path
    defaults: Defaults
    nodes: tuple[dict[str, Any], ...]  # Node objects as the API server would hold them
    steps: tuple[Step, ...] = field(default_factory=tuple)
    # The webhook's DRA mode (`defaults.draMode`, serve's --dra-mode); the classes are the
    # run's (--dra-device-classes, as serve's).
    dra_mode: str = "off"


_DEVICE_KEYS = {
    "id",
    "index",
    "count",
    "devmem",
    "devcore",
    "type",
    "numa",
    "health",
    "mode",
    "migProfiles",
}


def _whole(raw: Mapping[str, Any], key: str, default: int | None, what: str) -> int:
    """A whole-number field; the message names it and what it counts."""
    if key not in raw and default is not None:
        return default
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ScenarioError(f"{key} must be a whole number ({what}), got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ScenarioError(f"{key} must be a whole number ({what}), got {value!r}") from None
    if number < 0:
        raise ScenarioError(f"{key} must not be negative ({what}), got {value!r}")
    return number


def _device(raw: Any, where: str) -> DeviceInfo:
    if not isinstance(raw, Mapping):
        raise ScenarioError(f"{where}: a device must be a mapping")
    unknown = set(raw) - _DEVICE_KEYS
    if unknown:
        raise ScenarioError(f"{where}: unknown device fields {sorted(unknown)}")
    kind = str(raw.get("type", NVIDIA))
    if NVIDIA.lower() not in kind.lower():
        # The scheduler counts only cards whose type names NVIDIA, as HAMi does: such a card
        # would be left out without a word, and its node be `node unregistered`.
        raise ScenarioError(
            f"{where}: type {kind!r} is not an NVIDIA type; HAMi's plugin registers "
            f"'NVIDIA-<model>' (e.g. 'NVIDIA-Tesla T4'), and cards of other types are not counted"
        )
    try:
        return DeviceInfo(
            id=str(raw["id"]),
            index=_whole(raw, "index", 0, "the card's index on the node"),
            count=_whole(raw, "count", 10, "tasks that may share the card"),
            devmem=_whole(raw, "devmem", None, "MiB"),
            devcore=_whole(raw, "devcore", 100, "percent of the card's cores"),
            type=kind,
            numa=_whole(raw, "numa", 0, "the card's NUMA node"),
            mode=str(raw.get("mode", "hami-core")),
            health=bool(raw.get("health", True)),
            # As the device plugin registers them: name, memoryMB, core, sliceCount, placements.
            mig_profiles=decode_profiles(raw.get("migProfiles"), str(raw.get("id"))),
        )
    except KeyError as e:
        raise ScenarioError(f"{where}: device is missing {e.args[0]!r}") from None
    except ScenarioError as e:
        raise ScenarioError(f"{where}: {e}") from None
    except (TypeError, ValueError, CodecError) as e:
        raise ScenarioError(f"{where}: {e}") from None


def _strings(raw: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    value = raw.get(key) or {}
    if not isinstance(value, Mapping):
        raise ScenarioError(f"{where}: node {raw['name']}: {key} must be a mapping")
    return {str(k): str(v) for k, v in value.items()}


def _node(raw: Any, where: str, families: Families) -> dict[str, Any]:
    """A Node as the API server holds it: NVIDIA's cards from `devices`, and any other
    family's as its vendor's device plugin registers them (`annotations`, and the extended
    resources under `allocatable`, which a family without a card list derives its cards from)."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
        raise ScenarioError(f"{where}: a node needs a name")
    unknown = set(raw) - {"name", "devices", "annotations", "allocatable", "labels"}
    if unknown:
        raise ScenarioError(f"{where}: unknown node fields {sorted(unknown)}")
    devices = raw.get("devices") or []
    annotations = _strings(raw, "annotations", where)
    allocatable = _strings(raw, "allocatable", where)
    labels = {"gpu": "on", **_strings(raw, "labels", where)}
    if not isinstance(devices, list):
        raise ScenarioError(f"{where}: node {raw['name']}: devices must be a list")
    if devices:
        infos = tuple(_device(d, f"{where}, device {i}") for i, d in enumerate(devices))
        annotations.setdefault(nv.NODE_REGISTER, encode_node_devices(infos))
        allocatable.setdefault(nv.GPU, str(sum(d.count for d in infos)))
    node = {
        "metadata": {"name": raw["name"], "annotations": annotations, "labels": labels},
        # The kubelet reports the device plugins' resources in both; HAMi reads capacity.
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }
    # Read as the scheduler's cache reads it, so that a registration it cannot use is
    # refused here naming the reason, not left to a `node unregistered` in every step.
    _, why = family_cards(node, families)
    inventory = node_inventory(node, families=families)
    if isinstance(inventory, Unregistered) or why:
        # A family's own reason first: NVIDIA's `no ... annotation` is what any other node says.
        reason = (
            inventory.why if isinstance(inventory, Unregistered) and not why else "; ".join(why)
        )
        flag = enabling_flag(families, annotations)
        if flag and not why:
            raise ScenarioError(
                f"{where}: node {raw['name']}: its device plugin's family is scheduled only "
                f"with {flag}=true, as HAMi's scheduler schedules it"
            )
        raise ScenarioError(
            f"{where}: node {raw['name']}: {reason} (give NVIDIA's cards as devices, another "
            "family's as its device plugin registers them: annotations and allocatable)"
        )
    return node


def _load_yaml_docs(path: Path, where: str) -> list[dict[str, Any]]:
    try:
        docs = list(yaml.safe_load_all(read_text(path)))
    except UnreadableFileError as e:
        raise ScenarioError(str(e) if where == str(path) else f"{where}: {e}") from None
    except yaml.YAMLError as e:
        raise ScenarioError(f"{where}: {path} is not valid YAML: {e}") from None
    return [d for d in docs if d is not None]


# What a DRA driver publishes and kube-scheduler allocates: counted with the same bookkeeper as
# `hami serve` (hami.cache.dra), a claim on the card its allocation names.
DRA_KINDS = ("ResourceSlice", "ResourceClaim")
Objects = tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...], str]


def _dra_object(item: dict[str, Any], where: str) -> dict[str, Any]:
    meta = item.get("metadata")
    if not isinstance(meta, dict) or not meta.get("name"):
        raise ScenarioError(f"{where}: a {item['kind']} has no metadata.name")
    if item["kind"] == "ResourceClaim" and not (item.get("status") or {}).get("allocation"):
        # The replay allocates nothing: kube-scheduler's DRA allocator would.
        raise ScenarioError(
            f"{where}: ResourceClaim {meta['name']!r} has no status.allocation; give it as "
            "kube-scheduler leaves it once allocated (devices.results naming driver, pool, device)"
        )
    if item["kind"] == "ResourceSlice":
        return item
    return {**item, "metadata": {"namespace": "default", **meta}}


def _pods(raw: Any, base: Path, where: str) -> Objects:
    if isinstance(raw, str):
        docs, label = _load_yaml_docs(base / raw, where), raw
    elif isinstance(raw, list):
        docs, label = raw, "inline pods"
    else:
        raise ScenarioError(
            f"{where}: apply takes a file path or a list of Pod, ResourceSlice and "
            "ResourceClaim manifests"
        )
    pods: list[dict[str, Any]] = []
    dra: list[dict[str, Any]] = []
    for doc in docs:
        listed = isinstance(doc, dict) and doc.get("kind") == "List"
        items = doc.get("items") if listed else [doc]
        for item in items if isinstance(items, list) else [items]:
            if isinstance(item, dict) and item.get("kind") in DRA_KINDS:
                dra.append(_dra_object(item, where))
                continue
            if not isinstance(item, dict) or item.get("kind", "Pod") != "Pod":
                got = item.get("kind") if isinstance(item, dict) else type(item).__name__
                raise ScenarioError(
                    f"{where}: only Pod, ResourceSlice and ResourceClaim manifests can be "
                    f"applied, got {got!r}"
                )
            meta = item.get("metadata")
            if not isinstance(meta, dict) or not meta.get("name"):
                raise ScenarioError(f"{where}: a pod has no metadata.name")
            if any(p["metadata"]["name"] == meta["name"] for p in pods):
                # The replay knows a pod by its name alone: the second would be dropped.
                raise ScenarioError(
                    f"{where}: pod {meta['name']!r} is applied twice; each pod needs its own name"
                )
            pods.append(item)
    return tuple(pods), tuple(dra), label


def load(path: Path, families: Families) -> Scenario:
    """The scenario, its nodes read as the cache reads them with `families`."""
    where = str(path)
    docs = _load_yaml_docs(path, where)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ScenarioError(f"{where}: expected one YAML mapping with nodes and steps")
    raw = docs[0]
    unknown = set(raw) - {"defaults", "nodes", "steps"}
    if unknown:
        raise ScenarioError(f"{where}: unknown top-level keys {sorted(unknown)}")
    d = raw.get("defaults") or {}
    try:
        gpu = str(d.get("gpuSchedulerPolicy", "spread"))
        parse_gpu_policy(gpu)
        defaults = Defaults(gpu, parse_node_policy(str(d.get("nodeSchedulerPolicy", "binpack"))))
    except PolicyError as e:
        raise ScenarioError(f"{where}: defaults: {e}") from None
    mode = str(d.get("draMode", "off"))
    if mode not in MODES:
        raise ScenarioError(f"{where}: defaults: draMode {mode!r}: valid are {', '.join(MODES)}")
    nodes = raw.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise ScenarioError(f"{where}: needs at least one node under 'nodes'")
    steps = []
    for i, s in enumerate(raw.get("steps") or []):
        swhere = f"{where}: step {i + 1}"
        if not isinstance(s, Mapping) or not set(s) <= {"apply", "delete", "expect"} or not s:
            raise ScenarioError(
                f"{swhere}: a step is 'apply: <file or pods>' or 'delete: [names]', and may "
                "have 'expect: {denied: [names]}'"
            )
        pods, dra, label = _pods(s["apply"], path.parent, swhere) if "apply" in s else ((), (), "")
        delete = s.get("delete") or []
        if not isinstance(delete, list) or not all(isinstance(n, str) for n in delete):
            raise ScenarioError(f"{swhere}: delete takes a list of pod names")
        parts = ([f"apply {label}"] if "apply" in s else []) + (
            [f"delete {', '.join(delete)}"] if delete else []
        )
        steps.append(Step(i, "; ".join(parts), pods, tuple(delete), _expected(s, swhere), dra))
    built = tuple(_node(n, f"{where}: node {i + 1}", families) for i, n in enumerate(nodes))
    _unique_cards(nodes, where)
    if not steps:
        raise ScenarioError(
            f"{where}: needs at least one step under 'steps' ('apply: <file or pods>' or "
            "'delete: [names]'): without one there is nothing to replay"
        )
    return Scenario(path, defaults, built, tuple(steps), mode)


def _expected(step: Mapping[str, Any], where: str) -> tuple[str, ...]:
    expect = step.get("expect") or {}
    denied = expect.get("denied", []) if isinstance(expect, Mapping) else None
    if (
        not isinstance(expect, Mapping)
        or set(expect) - {"denied"}
        or not isinstance(denied, list)
        or not all(isinstance(n, str) for n in denied)
    ):
        raise ScenarioError(f"{where}: expect takes 'denied: [names of pods admission refuses]'")
    return tuple(denied)


def _unique_cards(nodes: list[Any], where: str) -> None:
    """A card id (its UUID) names one card in the cluster: the allocation annotations name cards
    by it alone."""
    seen: dict[str, str] = {}
    for i, node in enumerate(nodes):
        for j, device in enumerate(node.get("devices") or []):
            here = f"node {i + 1} ({node['name']}), device {j}"
            card = str(device["id"])
            if card in seen:
                raise ScenarioError(
                    f"{where}: card id {card!r} is given twice, {seen[card]} and {here}; "
                    "each card needs its own id"
                )
            seen[card] = here
