"""The node tier's images, built from the repository by ``tests/e2e/images/build.sh``."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.e2e.cluster import LOG_ROOT, REPO_ROOT, unavailable

BUILD = REPO_ROOT / "tests" / "e2e" / "images" / "build.sh"
# debootstrap, pip inside the build and buildah's copies on two cores.
TIMEOUT = 1800.0


def build(bin_dir: Path) -> list[Path]:
    """Docker archives of every image, built on the host network before the tier starts."""
    LOG_ROOT.mkdir(parents=True, exist_ok=True)
    log = LOG_ROOT / "images-build.log"
    with log.open("w") as err:
        result = subprocess.run(
            ["bash", str(BUILD), str(bin_dir)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        unavailable(
            f"building the node tier's images failed (exit {result.returncode}); {log}:\n{tail}"
        )
    return [Path(line) for line in result.stdout.split()]
