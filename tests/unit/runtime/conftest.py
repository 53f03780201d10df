"""Fixtures of the runtime tests: a certificate and key `hami serve` accepts (`tls`)."""

from pathlib import Path

import pytest


@pytest.fixture
def tls(tmp_path: Path) -> list[str]:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("cert")
    key.write_text("key")
    return ["--tls-cert-file", str(cert), "--tls-key-file", str(key)]
