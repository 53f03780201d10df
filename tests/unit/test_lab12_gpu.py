"""Lab 12's cudaMalloc proof (Steps 7-8) with hami-py's limit, where a GPU is: on a machine with
nvidia-smi, nvcc and HAMi-core (LIBVGPU=<libvgpu.so>) it runs examples/lab12/gpu-proof.sh;
elsewhere it is skipped with the script's reason."""

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "lab12" / "gpu-proof.sh"
SKIPPED = 77


def test_two_processes_under_hamis_4096m_limit_are_each_refused_past_it() -> None:
    result = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, timeout=300, check=False
    )
    if result.returncode == SKIPPED:
        pytest.skip(result.stdout.strip())
    assert result.returncode == 0, result.stdout + result.stderr
    for pod in ("kai-hami-lab12-a", "kai-hami-lab12-b"):
        assert f"=== {pod} ===" in result.stdout
    assert result.stdout.count("limit=4096m\n") == 2
    assert result.stdout.count("allocate 3 GiB: no error\n") == 2
    assert result.stdout.count("allocate another 2 GiB: out of memory\n") == 2
