"""NVIDIA's FamilyWire: the names HAMi's NVIDIA device plugin shares with the scheduler."""

from hami.engine import names
from hami.engine import nvidianames as nv
from hami.engine.families.base import FamilyResources, FamilyWire
from hami.engine.requests import ResourceDefaults


def wire(defaults: ResourceDefaults = ResourceDefaults()) -> FamilyWire:
    """The wire for the resource names HAMi's device config (`nvidia:`) gives NVIDIA."""
    resources = defaults.names
    return FamilyWire(
        type=nv.NVIDIA,
        vendor=nv.NVIDIA,  # HAMi's DeviceVendor for these cards (its CommonWord)
        resources=FamilyResources(
            count=resources.gpu,
            memory=resources.memory,
            cores=resources.cores,
            extra=(resources.memory_percentage, resources.priority),
            memory_factor=defaults.memory_factor,
        ),
        register_annotation=nv.NODE_REGISTER,
        handshake_annotation=nv.NODE_HANDSHAKE,
        to_allocate_annotation=nv.DEVICES_TO_ALLOCATE,
        allocated_annotation=nv.DEVICES_ALLOCATED,
        lock_name=names.NODE_LOCK,
        use_type=nv.USE_GPUTYPE,
        nouse_type=nv.NOUSE_GPUTYPE,
        use_uuid=nv.USE_GPUUUID,
        nouse_uuid=nv.NOUSE_GPUUUID,
        reads=(nv.NUMA_BIND, nv.VGPU_MODE),
        dra_drivers=nv.DRA_DRIVERS,
    )


WIRE = wire()
