"""A small error vocabulary for API server calls.

Callers decide by kind (retry, re-read, give up) rather than by HTTP status,
so every failure from the client library or the network is mapped onto one of
these before it leaves hami.kube. The names are the HTTP vocabulary the rest of
hami codes against, hence no "Error" suffix (ruff N818).
"""

from collections.abc import Mapping
from typing import Any

import orjson


class KubeError(Exception):
    """An API call failed; `status` is the HTTP status when there was a response."""

    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFound(KubeError):  # noqa: N818
    pass


class BadKubeconfig(KubeError):  # noqa: N818
    """No usable credentials: the kubeconfig is missing, unreadable or not a kubeconfig."""


class Conflict(KubeError):  # noqa: N818
    """409: a resourceVersion precondition failed or the object is already in the wanted state."""


class Gone(KubeError):  # noqa: N818
    """410: the resourceVersion is too old for the server; the caller must list again."""


class Unavailable(KubeError):  # noqa: N818
    """Worth retrying later: a timeout, a broken connection, 429 or 5xx."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, status=status, reason=reason)
        self.retry_after = retry_after


def _retry_after(headers: Mapping[str, str], status_obj: Mapping[str, Any]) -> float | None:
    raw = headers.get("Retry-After")
    if raw is not None:
        try:
            return max(0.0, float(raw))
        except ValueError:
            pass  # an HTTP date: the Status details below, if any, say the same in seconds
    details = status_obj.get("details")
    seconds = details.get("retryAfterSeconds") if isinstance(details, Mapping) else None
    return float(seconds) if isinstance(seconds, int | float) else None


def from_response(status: int, body: bytes, headers: Mapping[str, str], what: str) -> KubeError:
    """Map a non-2xx response to an error; `what` names the call for the message."""
    try:
        parsed = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        parsed = {}
    status_obj: Mapping[str, Any] = parsed if isinstance(parsed, dict) else {}
    detail = status_obj.get("message") or body[:200].decode("utf-8", "replace") or "no body"
    reason = str(status_obj.get("reason") or "")
    message = f"{what}: HTTP {status}: {detail}"
    if status == 404:
        return NotFound(message, status=status, reason=reason)
    if status == 409:
        return Conflict(message, status=status, reason=reason)
    if status == 410:
        return Gone(message, status=status, reason=reason)
    if status == 429 or status >= 500:
        return Unavailable(
            message,
            status=status,
            reason=reason,
            retry_after=_retry_after(headers, status_obj),
        )
    return KubeError(message, status=status, reason=reason)
