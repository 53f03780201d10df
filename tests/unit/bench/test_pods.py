"""A bench's cleanup that the API server refuses is a warning: the run's figures are out by
then, and a bench that dies here loses the runs after it."""

import asyncio
import socket
from pathlib import Path

import pytest
import yaml

from tests.bench.pods import delete_pods


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # closed again: connections to it are refused


def test_a_delete_the_api_server_refuses_is_tried_three_times_then_warned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": f"https://127.0.0.1:{_closed_port()}",
                            "insecure-skip-tls-verify": True,
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    asyncio.run(delete_pods(str(kubeconfig), "bench-run", pause=0))
    warnings = capsys.readouterr().err.splitlines()
    assert [w.split(":", 2)[1] for w in warnings] == [
        f" deleting the pods of bench-run (attempt {n} of 3)" for n in (1, 2, 3)
    ]
