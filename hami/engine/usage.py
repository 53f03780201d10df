"""What one pod's allocation takes from each card: HAMi's collapsed usage.

Apart from hami.engine.state (which builds node states with the families' scores) so that the
namespace quota and NVIDIA's fit, below the families, can count a pod's usage.
"""

from collections.abc import Mapping

from hami.engine.mig import pod_instances
from hami.engine.model import MigInstance, PodDevices, Usage
from hami.engine.shared import shared


def pod_usage(
    devices: PodDevices,
    n_init: int,
    init_done: bool = False,
    instances: Mapping[str, tuple[MigInstance, ...]] | None = None,
    mig_cards: frozenset[str] = frozenset(),
) -> dict[str, Usage]:
    """What one pod's allocation takes from each card (HAMi's collapsed usage).

    Init containers run one after another and before the app containers, so a
    card carries the larger of the init peak and the app sum, and at least one
    slot while any container uses it. Once every init container has finished
    only the app containers count.

    MIG instances (`instances`, by card; by default those the devices carry) occupy their
    placements for the pod's whole life, init containers' too, as HAMi's device plugin
    keeps them. A card of `mig_cards` (the node's cards in MIG mode) that the pod holds
    without an instance is counted as `bare`.
    """
    init = () if init_done else devices[:n_init]
    app = devices[n_init:]
    init_mem: dict[str, int] = {}
    init_cores: dict[str, int] = {}
    for container in init:
        for d in container:
            init_mem[d.uuid] = max(init_mem.get(d.uuid, 0), d.usedmem)
            init_cores[d.uuid] = max(init_cores.get(d.uuid, 0), d.usedcores)
    app_slots: dict[str, int] = {}
    app_mem: dict[str, int] = {}
    app_cores: dict[str, int] = {}
    for container in app:
        for d in container:
            app_slots[d.uuid] = app_slots.get(d.uuid, 0) + 1
            app_mem[d.uuid] = app_mem.get(d.uuid, 0) + d.usedmem
            app_cores[d.uuid] = app_cores.get(d.uuid, 0) + d.usedcores
    held = pod_instances(devices) if instances is None else instances
    out = {}
    for uuid in dict.fromkeys([*init_mem, *app_slots]):
        mig = held.get(uuid, ())
        out[uuid] = shared(
            Usage(
                used=max(app_slots.get(uuid, 0), 1),
                usedmem=max(init_mem.get(uuid, 0), app_mem.get(uuid, 0)),
                usedcores=max(init_cores.get(uuid, 0), app_cores.get(uuid, 0)),
                mig=mig,
                bare=int(not mig and uuid in mig_cards),
            )
        )
    for uuid, mig in held.items():
        if uuid not in out and mig:
            out[uuid] = Usage(mig=mig)
    return out
