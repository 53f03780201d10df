"""HAMi v2.10's node locks on the wire: `hami.io/mutex.lock`, and a family's own lock.

HAMi's value is `<RFC 3339 time>,<namespace>,<name>` (pkg/util/nodelock): when the lock was
taken and the pod it was taken for. A legacy lock holds the bare time and names no pod. HAMi
frees a lock after DEFAULT_EXPIRY; when ours may free one earlier is
hami.service.nodelock.rules.

A family whose FamilyWire names a lock of its own (HAMi's LockNode for that vendor, see the
family's module) has the legacy form: a bare RFC 3339 time, naming no pod,
freed after the family's `lock_expiry_seconds`; its vendor's device plugin removes it after
Allocate, whoever took it. The same rules read both forms (a bare time can only expire).
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hami.engine.codec import CodecError
from hami.engine.families.base import FamilyWire
from hami.engine.families.registry import Families
from hami.engine.inventory import split_devices
from hami.engine.model import PodDevices
from hami.engine.names import NODE_LOCK
from hami.kube.errors import KubeError

DEFAULT_EXPIRY = timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class LockSpec:
    """One node lock: its annotation, its expiry, and whether its value names the pod it was
    taken for (HAMi's) or is a bare time (a family's own)."""

    key: str = NODE_LOCK
    expiry: timedelta = DEFAULT_EXPIRY
    names_pod: bool = True

    def encode(self, now: datetime, namespace: str, name: str) -> str:
        if self.names_pod:
            return encode_node_lock(now, namespace, name)
        # To the microsecond, so that the value one bind wrote is told apart from any other
        # (it names no pod); Go's time.Parse(time.RFC3339, ...) reads the fraction.
        return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def within(self) -> str:
        """The expiry as HAMi words its contention error: `5m0s` for its own lock, `2 minutes`
        for a family's ("node %s has been locked within 2 minutes")."""
        minutes, seconds = divmod(int(self.expiry.total_seconds()), 60)
        if self.names_pod or seconds or not minutes:
            return go_duration(self.expiry)
        return f"{minutes} minute{'s' if minutes != 1 else ''}"


def family_lock(wire: FamilyWire) -> LockSpec | None:
    """The family's own node lock; None for a family that takes HAMi's lock or none."""
    if not wire.lock_name or wire.lock_name == NODE_LOCK:
        return None
    return LockSpec(wire.lock_name, timedelta(seconds=wire.lock_expiry_seconds), names_pod=False)


def family_locks(app: PodDevices, families: Families) -> tuple[LockSpec, ...]:
    """The families' own locks a bind of these app containers' devices takes, by annotation
    (HAMi's LockNode looks at the app containers alone, as the vendor plugin that removes the
    lock does)."""
    by_type = families.other_by_type()
    _, others = split_devices(app, families)
    own = (family_lock(by_type[k].wire) for k, got in others.items() if any(got))
    return tuple(sorted({lock for lock in own if lock is not None}, key=lambda lock: lock.key))


def lock_keys(families: Families) -> tuple[str, ...]:
    """Every node lock annotation: HAMi's, then each family's own."""
    own = (family_lock(f.wire) for f in families.others)
    return (NODE_LOCK, *sorted({lock.key for lock in own if lock is not None}))


class NodeLockContention(KubeError):  # noqa: N818  (HAMi's ErrNodeLockContention)
    """Another pod holds the node's lock and may still be waiting for its devices."""


def encode_node_lock(now: datetime, namespace: str, name: str) -> str:
    return f"{now.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')},{namespace},{name}"


def decode_node_lock(value: str) -> tuple[datetime, str | None, str | None]:
    """(time, namespace, name); legacy locks hold a bare RFC 3339 time and no owner."""
    parts = value.split(",")
    try:
        when = datetime.fromisoformat(parts[0].replace("Z", "+00:00"))
    except ValueError as e:
        raise CodecError(f"node lock {value!r} does not start with an RFC 3339 time") from e
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    if len(parts) >= 3:
        return when, parts[1], ",".join(parts[2:])
    return when, None, None


def lock_holder(value: str | None) -> tuple[str, str] | None:
    """The pod (namespace, name) a lock value names; None for no lock, a legacy or unreadable
    one."""
    try:
        _, namespace, name = decode_node_lock(value or "")
    except CodecError:
        return None
    return None if namespace is None or name is None else (namespace, name)


def owns(value: str, namespace: str, name: str) -> bool:
    """Whether namespace/name may release a lock of this value."""
    try:
        _, holder_ns, holder_name = decode_node_lock(value)
    except CodecError:
        return False
    # A legacy lock names no owner; HAMi lets any pod release it.
    return holder_ns is None or (holder_ns, holder_name) == (namespace, name)


def go_duration(d: timedelta) -> str:
    """Go's time.Duration.String() for whole-second durations, e.g. 5m0s, as HAMi prints it."""
    total = d.total_seconds()
    hours, rest = divmod(int(total), 3600)
    minutes, seconds = divmod(rest, 60)
    secs = f"{seconds + (total - int(total)):g}s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    if minutes:
        return f"{minutes}m{secs}"
    return secs
