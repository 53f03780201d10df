"""HAMi v2.10's node lock on the wire: the `hami.io/mutex.lock` Node annotation.

The value is `<RFC 3339 time>,<namespace>,<name>` (pkg/util/nodelock): when the lock was taken
and the pod it was taken for. A legacy lock holds the bare time and names no pod. HAMi frees a
lock after DEFAULT_EXPIRY; when ours may free one earlier is hami.service.nodelock.rules.
"""

from datetime import UTC, datetime, timedelta

from hami.engine.codec import CodecError
from hami.kube.errors import KubeError

DEFAULT_EXPIRY = timedelta(minutes=5)


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
