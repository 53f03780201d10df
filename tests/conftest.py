"""Every test runs inside tests.tier.running, so that one not marked e2e fails at once if it
reaches the Kubernetes binaries' build (tests/e2e/cluster.py ensure_binaries, built_tool)."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests import tier


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    with tier.running(item.nodeid, item.get_closest_marker("e2e") is not None):
        return (yield)
