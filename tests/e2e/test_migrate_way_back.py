"""docs/migrate-from-hami.md's Forward and Back, run as written, leave HAMi's release as it was.

HAMi v2.10.0's own chart is installed as Lab 14 installs it, with Step 3's `vgpu-monitor`
patch (tests/e2e/hamichart.py, which lists the harness differences). Then every command of the
page's Forward and Back sections, in order, through bash, with kubectl, helm and hami on PATH;
only names change: this test's namespaces and release names for `kube-system`, `hami`,
`hami-system` and `hami-py`, this checkout's chart for `./helm/hami`, and the values `hami
migrate check` printed for the page's `--set migration.hamiNamespace=kube-system`. `rollout
status` lines are left out (no kubelet runs pods here), and the certificate Secret the page
deletes is written as our scheduler pods write it at their start.

Afterwards every object of HAMi's release equals what it was, field by field: untouched ones
to the resourceVersion (the DaemonSet's generation with it), the Deployment bar its generation
(scaled to 0 and back), the webhook configuration bar what a re-created object gets anew (uid,
creationTimestamp); the release's values and history are unchanged.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_helm_render import CHART, helm, helm_binary
from tests.unit.test_readme import command_lines

from .cluster import ControlPlane
from .hamichart import (
    hold_lease,
    install_as_lab14,
    manifest_objects,
    patch_out_monitor,
    remove,
)
from .hamichart import release_name as hami_release_name
from .kube import Kube, wait_for
from .test_helm import GPU_POD, dry_run, helm_env, release_name

pytestmark = pytest.mark.e2e

DOC = Path(__file__).resolve().parents[2] / "docs" / "migrate-from-hami.md"
HAMI_POD = "hami-scheduler-87f65f795-84l6d"  # HAMi's scheduler pod, as Lab 14 shows it


def section(start: str, end: str) -> list[str]:
    text = DOC.read_text()
    return command_lines(text[text.index(start) : text.index(end)])


class Names:
    def __init__(self, hami: str, hami_ns: str, ours: str, ours_ns: str) -> None:
        self.hami, self.hami_ns, self.ours, self.ours_ns = hami, hami_ns, ours, ours_ns
        self.install_values = ""

    def localize(self, line: str) -> str | None:
        if "rollout status" in line:
            return None
        if line == "hami migrate check":
            return (
                f"hami migrate check --hami-namespace {self.hami_ns} --hami-release {self.hami} "
                f"--release {self.ours} --namespace {self.ours_ns}"
            )
        assert self.install_values, "hami migrate check runs first"
        for old, new in (
            ("./helm/hami", str(CHART)),
            ("<registry>", "registry.invalid"),
            ("--set migration.hamiNamespace=kube-system", self.install_values),
            ("deploy/hami-scheduler", f"deploy/{self.hami}-scheduler"),
            ("mutatingwebhookconfiguration hami-webhook", f"mutatingwebhookconfiguration {self.hami}-webhook"),
            ("-n kube-system", f"-n {self.hami_ns}"),
            ("hami-py", self.ours),
            ("hami-system", self.ours_ns),
        ):  # fmt: skip
            line = line.replace(old, new)
        return line


def run(line: str, env: dict[str, str], folder: Path) -> str:
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", line],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, f"$ {line}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def snapshot(kube: Kube, objects: list[tuple[str, str]], namespace: str) -> dict[str, Any]:
    return {f"{k}/{n}": kube.get(k, n, namespace) for k, n in objects}


def without(obj: dict[str, Any], *fields: str) -> dict[str, Any]:
    metadata = {k: v for k, v in obj["metadata"].items() if k not in fields}
    return {**obj, "metadata": metadata}


def test_forward_and_back_as_written_leave_hamis_release_as_it_was(
    control_plane: ControlPlane, kube: Kube, tmp_path: Path
) -> None:
    hami, ours = hami_release_name(), release_name("hami-py")
    hami_ns, ours_ns = f"{hami}-sys", f"{ours}-sys"
    kube("create", "namespace", hami_ns)
    env = helm_env(control_plane, tmp_path)
    install_as_lab14(hami, hami_ns, env)
    try:
        patch_out_monitor(kube, hami, hami_ns)
        hold_lease(kube, hami_ns, HAMI_POD)
        objects = manifest_objects(hami, hami_ns, env)
        assert ("DaemonSet", f"{hami}-device-plugin") in objects
        before = snapshot(kube, objects, hami_ns)
        values = helm("get", "values", hami, "-n", hami_ns, "-o", "json", env=env).stdout
        history = helm("history", hami, "-n", hami_ns, "-o", "json", env=env).stdout
        try:
            follow_the_page(Names(hami, hami_ns, ours, ours_ns), control_plane, kube, env, tmp_path)
        finally:
            helm("uninstall", ours, "-n", ours_ns, "--ignore-not-found", env=env)
        after = snapshot(kube, objects, hami_ns)
        assert helm("get", "values", hami, "-n", hami_ns, "-o", "json", env=env).stdout == values
        assert helm("history", hami, "-n", hami_ns, "-o", "json", env=env).stdout == history
    finally:
        remove(kube, hami, hami_ns, env)
    assert after.keys() == before.keys()
    stopped = {
        f"Deployment/{hami}-scheduler": ("generation",),  # scaled to 0 and back
        # Deleted and made again from the saved copy.
        f"MutatingWebhookConfiguration/{hami}-webhook": ("uid", "creationTimestamp", "generation"),
    }
    for key in before:
        if key in stopped:
            volatile = (*stopped[key], "resourceVersion", "managedFields")
            assert without(after[key], *volatile) == without(before[key], *volatile), key
        else:  # untouched: the same resourceVersion, so the same generation too
            assert after[key] == before[key], key
    ds = after[f"DaemonSet/{hami}-device-plugin"]
    assert [c["name"] for c in ds["spec"]["template"]["spec"]["containers"]] == ["device-plugin"]
    wait_for(
        lambda: dry_run(kube, GPU_POD, "default").returncode == 0,
        timeout=30,
        what="our uninstalled webhook to stop refusing GPU pods",
    )


def follow_the_page(
    names: Names, control_plane: ControlPlane, kube: Kube, env: dict[str, str], folder: Path
) -> None:
    """Forward, then Back, each command as the page writes it but for `names`."""
    tools = (control_plane.bin_dir, helm_binary().parent, Path(sys.executable).parent)
    shell = {**env, "PATH": ":".join(str(p) for p in tools) + ":/usr/bin:/bin"}
    forward = section("**Forward.**", "**Back.**")
    back = section("**Back.**", "**The permanent variant.**")
    assert forward[0] == "hami migrate check"
    for line in forward + back:
        local = names.localize(line)
        if local is None:
            continue
        out = run(local, shell, folder)
        if line == "hami migrate check":
            assert "Safe to hand over" in out, out
            (install,) = [x for x in out.splitlines() if "helm install" in x]
            sets = re.findall(r"--set (migration\.\S+)", install)
            assert sets == [
                f"migration.hamiNamespace={names.hami_ns}",
                f"migration.hamiRelease={names.hami}",
            ]
            names.install_values = " ".join(f"--set {s}" for s in sets)
        if line.startswith("helm install hami-py"):
            # Our scheduler pods write it at their start; none runs here.
            secret = f"{names.ours}-scheduler-tls"
            kube("-n", names.ours_ns, "create", "secret", "generic", secret)
