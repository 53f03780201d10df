"""The sGPU's sharing rules: QoS policies and online/offline app classes.

A shared sGPU card runs under one QoS policy at a time (best-effort, fixed-share or
burst-share), which its device plugin reports per card; a pod names the policy it wants
(`metax-tech.com/sgpu-qos-policy`, best-effort by default) and may join a card in use only
under the same policy. A pod may instead name an app class (`online` or `offline`): such
pods share cards only with each other, and an online pod outranks offline ones.
"""

from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from hami.engine.codec import CodecError, decode_pod_devices
from hami.engine.families.base import Claim
from hami.engine.families.common import quantity_value
from hami.engine.families.metax.config import APP_CLASS, QOS_POLICY
from hami.engine.model import ContainerDevices, PodDevices

BEST_EFFORT = "best-effort"
FIXED_SHARE = "fixed-share"
BURST_SHARE = "burst-share"
POLICIES = (BEST_EFFORT, FIXED_SHARE, BURST_SHARE)
ONLINE = "online"
OFFLINE = "offline"

Annotations = Mapping[str, str]


def claim(count_name: str, container: Mapping[str, Any], pod: Mapping[str, Any]) -> Claim:
    """HAMi's MutateAdmission for the sGPU: claimed when the count is a limit; an app class
    must be online or offline and ask for one card; a pod that is not online gets the
    best-effort policy unless it names a valid one."""
    limits = (container.get("resources") or {}).get("limits") or {}
    if count_name not in limits:
        return Claim(claimed=False)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    app_class = annotations.get(APP_CLASS)
    if app_class is not None:
        if app_class not in (ONLINE, OFFLINE):
            return Claim(True, error=f"{APP_CLASS} must be set one of [{ONLINE}, {OFFLINE}]")
        if quantity_value(limits[count_name]) != 1:
            return Claim(True, error="app-class pod must request single device")
    if app_class == ONLINE:
        return Claim(True)
    policy = annotations.get(QOS_POLICY)
    if policy is None:
        return Claim(True, annotations=((QOS_POLICY, BEST_EFFORT),))
    if policy in POLICIES:
        return Claim(True)
    return Claim(True, error=f"{QOS_POLICY} must be set one of [{', '.join(POLICIES)}]")


def online(annotations: Annotations) -> bool:
    return annotations.get(APP_CLASS) == ONLINE


def expected(annotations: Annotations, cores: int) -> str:
    """The policy a card runs under once a pod (not online) holds it with `cores`: a card
    taken whole (100 cores) has none."""
    return "" if cores == 100 else annotations.get(QOS_POLICY, "")


def in_pod(annotations: Annotations, allocated: PodDevices) -> dict[str, str]:
    """The policy each card takes from the pod's earlier containers (HAMi's AddResourceUsage
    changes the card's policy as it goes); nothing for an online pod."""
    if online(annotations):
        return {}
    return {d.uuid: expected(annotations, d.usedcores) for c in allocated for d in c}


@lru_cache(maxsize=4096)
def _decoded(value: str) -> PodDevices:
    try:
        return decode_pod_devices(value)
    except CodecError:
        return ()


def held(
    card: str, registered: str, holders: Iterable[Annotations], allocation_key: str
) -> str | None:
    """The policy the pods holding `card` put it under, where the device plugin has not
    reported it yet: HAMi keeps this in a process-local cache from each bind until the
    registration shows it (JitteryQosCache); here it is read from the holders themselves
    (deliberate: the same in every replica and after a restart, and never stale once the
    pod that set it is gone). None where the registration already says it."""
    for pod in holders:
        if online(pod):
            continue
        devices: ContainerDevices = tuple(
            d for c in _decoded(pod.get(allocation_key, "")) for d in c if d.uuid == card
        )
        cores = devices[0].usedcores if devices else 0
        want = expected(pod, cores)
        if want != registered:
            return want
    return None


def policy_allows(wanted: str, used: int, exclusive: bool, current: str) -> bool:
    """HAMi's checkDeviceQos: an unused card switches to any policy, a whole-card request
    needs none, otherwise the card's policy must be unset or the pod's."""
    if used == 0 or exclusive:
        return True
    return current in ("", wanted)


def class_allows(wanted: str, used: int, holders: Sequence[Annotations]) -> bool:
    """HAMi's checkAppClass: pods with an app class share cards only with such pods, and an
    offline pod never joins a card running an online one."""
    if used == 0:
        return True
    classes = {pod.get(APP_CLASS) for pod in holders}
    has_online, has_offline = ONLINE in classes, OFFLINE in classes
    classed = wanted in (ONLINE, OFFLINE)
    if (has_online or has_offline) != classed:
        return False
    return not (has_online and wanted == OFFLINE)


def _counts(holders: Sequence[Annotations]) -> tuple[int, int]:
    classes = [pod.get(APP_CLASS) for pod in holders]
    return classes.count(ONLINE), classes.count(OFFLINE)


def online_rank(holders: Sequence[Annotations]) -> tuple[int, int, int]:
    """Sort key for an online pod's cards (HAMi's prioritizeOnlineDevices): fewest online
    pods first, then fewest offline; cards running only offline pods last."""
    on, off = _counts(holders)
    if on == 0 and off > 0:
        return (1, 0, off)
    return (0, on, off)


def online_score(holders: Sequence[Annotations]) -> int:
    """One card's part of an online pod's node score (HAMi's scoreOnlineDevices)."""
    on, off = _counts(holders)
    if off > 0 and on == 0:
        return -100 * off
    return -20 * on - 2 * off
