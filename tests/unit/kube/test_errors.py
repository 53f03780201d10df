import orjson
import pytest

from hami.kube.errors import Conflict, Gone, KubeError, NotFound, Unavailable, from_response


def status(code: int, reason: str, message: str, **extra: object) -> bytes:
    return orjson.dumps(
        {
            "kind": "Status",
            "status": "Failure",
            "code": code,
            "reason": reason,
            "message": message,
            **extra,
        }
    )


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (404, NotFound),
        (409, Conflict),
        (410, Gone),
        (429, Unavailable),
        (500, Unavailable),
        (503, Unavailable),
        (403, KubeError),
        (422, KubeError),
    ],
)
def test_status_maps_to_kind(code: int, kind: type[KubeError]) -> None:
    err = from_response(code, status(code, "Whatever", "the server's words"), {}, "get pod a/b")
    assert type(err) is kind
    assert err.status == code
    assert str(err) == f"get pod a/b: HTTP {code}: the server's words"


def test_retry_after_header_wins() -> None:
    err = from_response(429, b"", {"Retry-After": "3"}, "patch node n1")
    assert isinstance(err, Unavailable)
    assert err.retry_after == 3.0


def test_retry_after_from_status_details() -> None:
    body = status(429, "TooManyRequests", "slow down", details={"retryAfterSeconds": 2})
    err = from_response(429, body, {}, "patch node n1")
    assert isinstance(err, Unavailable)
    assert err.retry_after == 2.0
    assert err.reason == "TooManyRequests"


def test_non_json_body_is_quoted() -> None:
    err = from_response(502, b"<html>bad gateway</html>", {}, "list pods")
    assert isinstance(err, Unavailable)
    assert err.retry_after is None
    assert "bad gateway" in str(err)
