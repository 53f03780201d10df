"""The loopback guard itself: what it flags and what it lets pass."""

import pytest

from .loopback import off_loopback


@pytest.mark.parametrize(
    "line",
    [
        'failed calling webhook "vgpu.hami.io": Post "https://hami-scheduler.ns.svc:443/webhook"',
        "dial tcp 10.0.0.7:443: connect: connection refused",
        "dial tcp [fd00::1]:443: i/o timeout",
        "Post https://192.168.1.4:9443/webhook",
        "scrape http://10.0.0.9:9395/metrics",
    ],
)
def test_off_loopback_targets_are_flagged(line: str) -> None:
    assert off_loopback([line]) == [line]


@pytest.mark.parametrize(
    "line",
    [
        "dial tcp 127.0.0.1:6443: connect: connection refused",
        'Post "https://127.0.0.1:40123/webhook?timeout=10s"',
        "dial tcp [::1]:443",
        "http://localhost:9090/api/v1/query",
        "see https://kubernetes.io/docs/reference for the flags",
        "--service-cluster-ip-range=10.0.0.0/24",
    ],
)
def test_loopback_and_documentation_pass(line: str) -> None:
    assert off_loopback([line]) == []
