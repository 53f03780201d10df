"""Whether a pod's allocation annotation adds up, before the cache counts it.

The annotations are scheduling state that only the scheduler writes, and the
chart's ValidatingAdmissionPolicy has kube-apiserver enforce that. This is the
second line for clusters without it: an allocation is counted only as far as
a bind of ours could have written it. One that cannot be ours (a pod that asks
for no GPU, more cards than asked for, a node the pod does not run on, a card
its node does not have) is not counted as an allocation (hami.engine.trust
counts a bound pod carrying one as the kubelet's whole cards); one that claims
less than the pod's own request implies is counted as requested, since
under-counting a running pod is what lets the next pod over-commit its card.
"""

from collections.abc import Mapping
from dataclasses import dataclass, replace

from hami.engine.inventory import PodAllocation
from hami.engine.model import (
    ContainerDevice,
    ContainerDevices,
    ContainerRequest,
    PodDevices,
    PodRequest,
)


@dataclass(frozen=True, slots=True)
class Vetted:
    allocation: PodAllocation | None  # what to count; None: nothing
    problem: str = ""  # why it was not counted as written; "" when it was


def vet_allocation(
    alloc: PodAllocation,
    bound_to: str,
    request: PodRequest,
    devmem: Mapping[str, int] | None,
) -> Vetted:
    """`bound_to` is the pod's spec.nodeName ("" while unbound), `request` what its spec asks
    for, `devmem` the MiB a percentage is taken of on each of the node's cards
    (DeviceInfo.share_base), None while the node's cards are not known."""
    if bound_to and bound_to != alloc.node:
        return Vetted(None, f"allocated on node {alloc.node} but the pod runs on {bound_to}")
    if devmem is not None:
        unknown = sorted({d.uuid for c in alloc.all_devices() for d in c} - devmem.keys())
        if unknown:
            return Vetted(
                None, f"it names card {', '.join(unknown)}, which node {alloc.node} does not have"
            )
    # Matched in order against the containers that ask for a GPU: we write an empty entry for
    # a GPU-less container, HAMi v2.10 leaves it out, and either way the order is the spec's.
    asks = iter([a for a in (*request.init, *request.app) if a is not None])
    raised: list[ContainerDevices] = []
    notes: list[str] = []
    devices = per_container(alloc.devices, request)
    if devices is not alloc.devices:  # most allocations have an entry per container already
        alloc = replace(alloc, devices=devices)
    for index, given in enumerate(alloc.devices):
        if not given:
            raised.append(given)
            continue
        ask = next(asks, None)
        if ask is None:
            return Vetted(None, "it lists more containers with cards than ask for a GPU")
        if len(given) > ask.nums:
            return Vetted(
                None,
                f"entry {index} holds {len(given)} cards but its container asks for {ask.nums}",
            )
        raised.append(tuple(_at_least_requested(d, ask, devmem or {}, index, notes) for d in given))
    if not notes:
        return Vetted(alloc)
    return Vetted(replace(alloc, devices=tuple(raised)), "; ".join(notes))


def per_container(devices: PodDevices, request: PodRequest) -> PodDevices:
    """One entry per container, init first, from either form of the allocation string.

    HAMi's device plugin names the container of the n-th entry by position, so we write an
    empty entry for every GPU-less container; HAMi v2.10's scheduler leaves those out (it pads
    under the card model, not under `NVIDIA`). Entries with cards are given, in order, to the
    containers that ask for a GPU, so that init and app usage is told apart either way.
    """
    containers = (*request.init, *request.app)
    if len(devices) == len(containers):
        return devices
    given = iter(d for d in devices if d)
    out = tuple(() if ask is None else next(given, ()) for ask in containers)
    return out + tuple(given)  # more than the pod asks for: left for the vetting to refuse


def _at_least_requested(
    d: ContainerDevice,
    ask: ContainerRequest,
    devmem: Mapping[str, int],
    index: int,
    notes: list[str],
) -> ContainerDevice:
    if d.mig is not None:
        return d  # a MIG instance holds what its profile holds, whatever the request
    # A node not registered (yet) leaves a percentage request unknown: count what is written.
    mem = ask.memreq if ask.memreq > 0 else ask.memory_on(devmem.get(d.uuid, 0))
    cores = ask.coresreq
    if d.usedmem >= mem and d.usedcores >= cores:
        return d
    notes.append(
        f"entry {index} on {d.uuid}: written {d.usedmem} MiB {d.usedcores}% but its "
        f"request takes {mem} MiB {cores}%, counted as requested"
    )
    return replace(d, usedmem=max(d.usedmem, mem), usedcores=max(d.usedcores, cores))
