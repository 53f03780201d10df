"""The annotations bind writes on a pod, in HAMi's format, in one merge patch."""

from hami.engine import names
from hami.engine.codec import encode_pod_devices
from hami.engine.model import PodDevices


def allocation_annotations(
    node: str, devices: PodDevices, unix_now: int, phase: str = names.PHASE_ALLOCATING
) -> dict[str, str]:
    """`phase` is `success` on a node without HAMi's device plugin: no Allocate will follow."""
    encoded = encode_pod_devices(devices)
    return {
        names.ASSIGNED_NODE: node,
        names.ASSIGNED_TIME: str(unix_now),
        names.DEVICES_TO_ALLOCATE: encoded,
        names.DEVICES_ALLOCATED: encoded,
        names.BIND_PHASE: phase,
        names.BIND_TIME: str(unix_now),
    }


def allocation_labels(node: str) -> dict[str, str]:
    # HAMi labels the pod with its node too; label selectors depend on it.
    return {names.ASSIGNED_NODE: node}
