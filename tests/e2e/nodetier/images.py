"""The node tier's images, built from the repository by ``tests/e2e/images/build.sh``."""

from __future__ import annotations

import os
import subprocess
import tempfile
from importlib.metadata import version
from pathlib import Path

from tests.e2e.cluster import LOG_ROOT, REPO_ROOT, unavailable
from tests.e2e.fake_device_plugin import compile_api

BUILD = REPO_ROOT / "tests" / "e2e" / "images" / "build.sh"
K8SBINS = REPO_ROOT / "tests" / "e2e" / "k8sbins"
# debootstrap, pip inside the build and buildah's copies on two cores.
TIMEOUT = 1800.0


def build(bin_dir: Path) -> list[Path]:
    """Docker archives of every image, built on the host network before the tier starts."""
    LOG_ROOT.mkdir(parents=True, exist_ok=True)
    log = LOG_ROOT / "images-build.log"
    env = {
        **os.environ,
        "HAMI_E2E_GRPCIO": version("grpcio"),
        "HAMI_E2E_PROTOBUF": version("protobuf"),
    }
    with tempfile.TemporaryDirectory() as scratch, log.open("w") as err:
        # The stand-in for HAMi's image serves the kubelet's device-plugin API, compiled here.
        proto = compile_api(K8SBINS, Path(scratch))
        result = subprocess.run(
            ["bash", str(BUILD), str(bin_dir), str(proto)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            timeout=TIMEOUT,
            check=False,
            env=env,
        )
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        unavailable(
            f"building the node tier's images failed (exit {result.returncode}); {log}:\n{tail}"
        )
    return [Path(line) for line in result.stdout.split()]
