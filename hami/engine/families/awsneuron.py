"""AWS Neuron (Inferentia and Trainium), as HAMi v2.10 schedules it (pkg/device/awsneuron).

No card list: HAMi derives a node's Neuron devices from its capacity of
`aws.amazon.com/neuron` (devices) and `aws.amazon.com/neuroncore` (cores), named
`<node>-AWSNeuron-<i>`, each shared by as many tasks as it has cores and carrying its
cores as a bit mask (two cores: 3). A container asks for whole devices, or for NeuronCores:
one or two cores of one device, or whole devices of two cores each. Several devices must be
contiguous (HAMi's graphSelect: any run on an Inferentia node, aligned runs of 4, 8 or 16
elsewhere); one device is the first from the tail with enough free cores, and a core ask
takes the core (bit) left free. The bind tells the device plugin which device or core
indexes to expose. HAMi takes no node lock and keeps no handshake for this family.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami.engine import reasons as r
from hami.engine.checks import Over, beyond
from hami.engine.families.base import (
    NO_BIND,
    NO_NODE,
    BindContext,
    Claim,
    FamilyFit,
    FamilyRequest,
    FamilyResources,
    FamilyWire,
    FitPod,
    NodeFacts,
)
from hami.engine.families.basic import capacity_of, index_suffix, int32, resources_from
from hami.engine.families.common import as_whole, encode_allocation, lookup, uuid_allowed
from hami.engine.model import (
    PERCENTAGE_UNSET,
    Card,
    ContainerDevice,
    ContainerDevices,
    DeviceInfo,
    PodDevices,
    Usage,
)
from hami.engine.policy import NodePolicy, filtered_out
from hami.engine.requests import INT32_MAX, MAX_GPUS_PER_CONTAINER, LimitError, RequestError

TYPE = "AWSNeuron"
RESOURCES = FamilyResources(count="aws.amazon.com/neuron", cores="aws.amazon.com/neuroncore")
NODE_TYPE, INSTANCE_TYPE = "AWSNodeType", "node.kubernetes.io/instance-type"
# HAMi's cap on cores per device in a core ask (its masks and annotations know two).
MAX_CORES_PER_DEVICE = 2
BY_DEVICE = ("unit", "device")  # FamilyRequest.extra of a whole-device ask
IDS, RESOURCE_TYPE = "AWS_NEURON_IDS", "NEURON_RESOURCE_TYPE"
ALLOC_TIME, ALLOCATED = "NEURON_ALLOC_TIME", "NEURON_ALLOCATED"
PREDICATE_NODE = "aws.amazon.com/predicate-node"


def wire(resources: FamilyResources = RESOURCES) -> FamilyWire:
    return FamilyWire(
        type=TYPE,
        vendor=TYPE,
        resources=resources,
        register_annotation="",  # the devices come from the node's capacity
        handshake_annotation="",
        to_allocate_annotation="",  # HAMi registers none for this family
        allocated_annotation="hami.io/aws-neuron-devices-allocated",
        lock_name="",  # HAMi's LockNode is a no-op here
        use_uuid="aws.amazon.com/use-neuron-uuid",
        nouse_uuid="aws.amazon.com/nouse-neuron-uuid",
        # The device plugin mounts a whole device and names the container's cores in this; the
        # Neuron runtime takes every core of the device without it.
        share_env=("NEURON_RT_VISIBLE_CORES",),
    )


def bits(mask: int) -> int:
    """HAMi's countMaskAvailable: the cores set in a mask (none for a mask below 1)."""
    return bin(mask).count("1") if mask > 0 else 0


def core_usage(used: int, cores: int) -> int:
    """HAMi's addCoreUsage: the mask a task takes on a device whose cores `used` are taken.
    It knows two cores only: on a free device one core is core 0 and anything else both;
    on a used one, whatever of the two is left (so a whole-device ask of a device of more
    cores marks two of them, a HAMi limit kept as it is)."""
    if used == 0:
        return 1 if cores == 1 else 3
    return 3 - used


def validated(value: Any, name: str, high: int) -> int:
    """HAMi's validateResourceRequest, with its messages."""
    n = as_whole(value)
    if n is None:
        raise RequestError(f"{name} must be an integer")
    if n <= 0:
        raise RequestError(f"{name} must be greater than 0")
    if n > high:
        raise RequestError(f"{name} must not exceed {high}")
    return n


def split_cores(cores: int, name: str) -> tuple[int, int]:
    """HAMi's splitCoreRequest: (devices, cores of each). HAMi divides by the cores per
    device of the first node it saw, at most two; we take two, which is that value for
    every Neuron device (all have two cores or more)."""
    if cores <= MAX_CORES_PER_DEVICE:
        return 1, cores
    if cores % MAX_CORES_PER_DEVICE:
        raise RequestError(f"{name} must be 1 or a multiple of {MAX_CORES_PER_DEVICE}, got {cores}")
    return cores // MAX_CORES_PER_DEVICE, MAX_CORES_PER_DEVICE


def contiguous(cards: Sequence[Card], start: int, count: int) -> list[int]:
    """HAMi's continuousDeviceAvailable: positions start.. of idle healthy devices, or none."""
    if len(cards) < start + count:
        return []
    run = range(start, start + count)
    if any(cards[i].usage.used > 0 or not cards[i].healthy for i in run):
        return []
    return list(run)


def graph_select(cards: Sequence[Card], count: int) -> list[int]:
    """HAMi's graphSelect: positions, in the cards' sorted order, of a contiguous run."""
    if not cards:
        return []
    node_type = cards[0].info.custom_value(NODE_TYPE)
    if node_type is None:
        return []
    if "inf" in node_type or "Inf" in node_type:
        step = 1  # a ring: any run
    elif count in (1, 4, 8, 16):
        step = count
    else:
        return []
    for start in range(0, len(cards), step):
        run = contiguous(cards, start, count)
        if run:
            return run
    return []


def _over(device: DeviceInfo, counted: Usage) -> Over | None:
    """The room rule (hami.engine.checks.beyond) as HAMi's fit counts it: tasks (the device's
    cores) and memory; the cores are bits of a mask the fit reads apart, as HAMi does (a task
    takes the bits left free: hami.engine.families.awsneuron.core_usage)."""
    u = counted
    return beyond(device, u.used, u.usedmem, u.usedcores, cores=False)


@dataclass(frozen=True, slots=True)
class AwsNeuron:
    wire: FamilyWire

    def decode_node(
        self, annotations: Mapping[str, str], node: NodeFacts = NO_NODE
    ) -> tuple[DeviceInfo, ...] | None:
        names = self.wire.resources
        devices = capacity_of(node, names.count)
        if not devices:
            return None
        cores = capacity_of(node, names.cores) or 0
        # HAMi keeps the first node's cores per device for every node (a global set once);
        # we take each node's own (see the deliberate differences).
        per_device = max(cores // devices, 0) if devices > 0 else 0
        custom = ((NODE_TYPE, node.labels.get(INSTANCE_TYPE, "")),)
        mask = int32(2**per_device - 1)
        return tuple(
            DeviceInfo(f"{node.name}-{TYPE}-{i}", i, per_device, 0, mask, TYPE, custom=custom)
            for i in range(devices)
        )

    def container_request(
        self, container: Mapping[str, Any], *, strict: bool = False
    ) -> FamilyRequest | None:
        names = self.wire.resources
        resources = container.get("resources") or {}
        cname = str(container.get("name", "?"))
        try:
            extra: tuple[tuple[str, str], ...] = ()
            count = lookup(resources, names.count)
            if count is not None:
                nums = validated(count, names.count, INT32_MAX)
                cores, extra = 0, (BY_DEVICE,)  # the device's cores: read off the card
            else:
                raw = lookup(resources, names.cores) if names.cores else None
                if raw is None:
                    return None
                nums, cores = split_cores(validated(raw, names.cores, 2 * INT32_MAX), names.cores)
            if nums > MAX_GPUS_PER_CONTAINER:
                raise LimitError(
                    f"container {cname} asks for {nums} {TYPE} devices; at most "
                    f"{MAX_GPUS_PER_CONTAINER} per container are supported"
                )
        except RequestError:
            if strict:
                raise
            return None
        return FamilyRequest(TYPE, nums, 0, PERCENTAGE_UNSET, cores, extra)

    def fit(
        self, cards: Sequence[Card], request: FamilyRequest, pod: FitPod, allocated: PodDevices
    ) -> FamilyFit:
        if request.nums > 1:
            return self.fit_run(cards, request.nums)
        counts: dict[str, int] = {}
        for card in reversed(cards):
            info, usage = card.info, card.usage
            # A whole-device ask wants as many cores as HAMi saw per device.
            cores = info.count if BY_DEVICE in request.extra else request.coresreq
            if not card.healthy:
                why = r.CARD_NOT_HEALTH
            elif not uuid_allowed(pod.annotations, info.id, self.wire):
                why = r.CARD_UUID_MISMATCH
            elif (full := _over(info, usage + Usage(1))) is not None:
                why = full.reason
            elif (filtered := filtered_out(pod.filters, usage.used)) is not None:
                why = filtered
            elif bits(info.devcore) - bits(usage.usedcores) < cores:
                why = r.CARD_INSUFFICIENT_CORE
            else:
                mask = core_usage(usage.usedcores, cores)
                return FamilyFit((ContainerDevice(info.id, 0, mask, TYPE),))
            counts[why] = counts.get(why, 0) + 1
        return FamilyFit(None, r.card_reasons(counts, len(cards)))

    def fit_run(self, cards: Sequence[Card], nums: int) -> FamilyFit:
        """Several devices: a contiguous run of whole devices. HAMi takes the run's
        positions in the sorted list as device indexes (a HAMi bug kept: the same only
        while the sort leaves the devices in index order, as it does for idle ones)."""
        run = graph_select(cards, nums)
        if not run:
            return FamilyFit(None, r.card_reasons({r.NUMA_NOT_FIT: 1}, len(cards)))
        picked = []
        for position in run:
            card = next((c for c in cards if c.info.index == position), None)
            if card is not None:
                picked.append(
                    ContainerDevice(card.info.id, card.info.devmem, card.info.devcore, TYPE)
                )
        return FamilyFit(tuple(picked))

    def room(self, card: Card, share: ContainerDevices) -> str | None:
        got = _over(card.info, card.usage)
        return None if got is None else str(got)

    def score_node(self, cards: Sequence[Card], devices: PodDevices, policy: NodePolicy) -> float:
        return 0.0

    def annotations(self, devices: PodDevices, bind: BindContext = NO_BIND) -> dict[str, str]:
        allocation = encode_allocation(self.wire, devices)
        if not allocation:
            return {}
        names = self.wire.resources
        out = {self.wire.allocated_annotation: allocation[self.wire.allocated_annotation]}
        per_device = {c.id: c.count for c in bind.cards}
        ids: list[str] = []  # HAMi keeps adding to one list across containers
        for i, container in enumerate(devices):
            if not container or i >= len(bind.containers):
                continue
            limits = (bind.containers[i].get("resources") or {}).get("limits") or {}
            for d in container:
                idx = index_suffix(d.uuid)
                if names.count in limits:
                    if (as_whole(limits[names.count]) or 0) > 0:
                        ids.append(str(idx))
                    continue
                base = per_device.get(d.uuid, MAX_CORES_PER_DEVICE) * idx
                for bit, offset in ((1, 0), (2, 1)):
                    if d.usedcores & bit:
                        ids.append(str(base + offset))
                        out[RESOURCE_TYPE] = names.cores
            if ids:
                out[IDS] = ",".join(ids)
                out[ALLOC_TIME] = str(bind.now_ns)
                out[ALLOCATED] = "false"
                out[PREDICATE_NODE] = bind.node
        return out

    def claim(self, container: Mapping[str, Any], pod: Mapping[str, Any]) -> Claim:
        """Claimed when the count or the cores are asked (limits or requests) and valid;
        refused with HAMi's message when not."""
        names = self.wire.resources
        resources = container.get("resources") or {}
        try:
            count = lookup(resources, names.count)
            if count is not None:
                validated(count, names.count, INT32_MAX)
                return Claim(True)
            raw = lookup(resources, names.cores) if names.cores else None
            if raw is None:
                return Claim(False)
            split_cores(validated(raw, names.cores, 2 * INT32_MAX), names.cores)
        except RequestError as e:
            return Claim(False, error=str(e))
        return Claim(True)


def from_config(section: Mapping[str, Any]) -> AwsNeuron:
    """The family from the `awsneuron` section of HAMi's device-config.yaml."""
    return AwsNeuron(wire(resources_from(section, RESOURCES)))


FAMILY = from_config({})
