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

import dataclasses
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.builders.chart import CHART, helm, helm_binary
from tests.e2e.chartrun import GPU_POD, dry_run, helm_env, release_name
from tests.unit.docs import command_lines

from .cluster import ControlPlane
from .hamichart import (
    HAMI_CHART,
    hold_lease,
    install_as_lab14,
    manifest_objects,
    patch_out_monitor,
    remove,
)
from .hamichart import release_name as hami_release_name
from .kube import Kube, wait_for

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
        # HAMi's release from the vendored chart, without hooks (no kubelet runs their Jobs).
        line = re.sub(r"^helm (get values|upgrade) hami ", rf"helm \1 {self.hami} ", line)
        line = line.replace("hami-charts/hami", str(HAMI_CHART)).replace(" --version 2.10.0", "")
        if line.startswith("helm upgrade"):
            line += " --no-hooks"
        for old, new in (
            ("./helm/hami", str(CHART)),
            ("<registry>", "registry.invalid"),
            ("--set migration.hamiNamespace=kube-system", self.install_values),
            ("deploy/hami-scheduler", f"deploy/{self.hami}-scheduler"),
            ("ds hami-device-plugin", f"ds {self.hami}-device-plugin"),
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


@dataclasses.dataclass
class Outcome:
    before: dict[str, Any]
    after: dict[str, Any]
    values: tuple[str, str]  # the release's values, before and after
    history: tuple[str, str]


def run_beside_hami(
    control_plane: ControlPlane, kube: Kube, folder: Path, page: Callable[[Names], list[str]]
) -> tuple[Names, Outcome]:
    """HAMi's chart as Lab 14 leaves it, then `page`'s commands; what HAMi's objects were."""
    hami, ours = hami_release_name(), release_name("hami-py")
    names = Names(hami, f"{hami}-sys", ours, f"{ours}-sys")
    kube("create", "namespace", names.hami_ns)
    env = helm_env(control_plane, folder)
    install_as_lab14(hami, names.hami_ns, env)
    get = ("-n", names.hami_ns, "-o", "json")
    try:
        patch_out_monitor(kube, hami, names.hami_ns)
        hold_lease(kube, names.hami_ns, HAMI_POD)
        objects = manifest_objects(hami, names.hami_ns, env)
        assert ("DaemonSet", f"{hami}-device-plugin") in objects
        before = snapshot(kube, objects, names.hami_ns)
        values = helm("get", "values", hami, *get, env=env).stdout
        history = helm("history", hami, *get, env=env).stdout
        try:
            follow(page(names), names, control_plane, kube, env, folder)
        finally:
            helm("uninstall", ours, "-n", names.ours_ns, "--ignore-not-found", env=env)
        outcome = Outcome(
            before,
            snapshot(kube, objects, names.hami_ns),
            (values, helm("get", "values", hami, *get, env=env).stdout),
            (history, helm("history", hami, *get, env=env).stdout),
        )
    finally:
        remove(kube, hami, names.hami_ns, env)
    wait_for(
        lambda: dry_run(kube, GPU_POD, "default").returncode == 0,
        timeout=30,
        what="our uninstalled webhook to stop refusing GPU pods",
    )
    return names, outcome


def test_forward_and_back_as_written_leave_hamis_release_as_it_was(
    control_plane: ControlPlane, kube: Kube, tmp_path: Path
) -> None:
    names, seen = run_beside_hami(control_plane, kube, tmp_path, lambda _: FORWARD + BACK)
    assert seen.values[1] == seen.values[0]
    assert seen.history[1] == seen.history[0]  # no helm upgrade of HAMi's release
    assert seen.after.keys() == seen.before.keys()
    stopped = {
        f"Deployment/{names.hami}-scheduler": ("generation",),  # scaled to 0 and back
        # Deleted and made again from the saved copy.
        f"MutatingWebhookConfiguration/{names.hami}-webhook": (
            "uid",
            "creationTimestamp",
            "generation",
        ),
    }
    for key, before in seen.before.items():
        if key in stopped:
            volatile = (*stopped[key], "resourceVersion", "managedFields")
            assert without(seen.after[key], *volatile) == without(before, *volatile), key
        else:  # untouched: the same resourceVersion, so the same generation too
            assert seen.after[key] == before, key
    ds = seen.after[f"DaemonSet/{names.hami}-device-plugin"]
    assert [c["name"] for c in ds["spec"]["template"]["spec"]["containers"]] == ["device-plugin"]


def test_the_permanent_variant_and_its_way_back_restore_hamis_release(
    control_plane: ControlPlane, kube: Kube, tmp_path: Path
) -> None:
    """Forward, the permanent variant, its way back, then Back step 2: HAMi's release has its
    values again and every object is as it was bar what an upgrade rewrites (the DaemonSet was
    rolled, as the page says, and its monitor patched out again)."""
    back_step_2 = [line for line in BACK if "hami-py" in line]
    names, seen = run_beside_hami(
        control_plane, kube, tmp_path, lambda _: FORWARD + PERMANENT + PERMANENT_BACK + back_step_2
    )
    assert seen.values[1] == seen.values[0]
    assert seen.after.keys() == seen.before.keys()
    volatile = ("uid", "creationTimestamp", "generation", "resourceVersion", "managedFields")
    rolled = "deprecated.daemonset.template.generation"
    ds = f"DaemonSet/{names.hami}-device-plugin"
    # Each upgrade puts the monitor back, each patch takes it out: four new templates.
    generations = [
        int(o[ds]["metadata"]["annotations"].pop(rolled)) for o in (seen.before, seen.after)
    ]
    assert generations[1] == generations[0] + 4
    for key, before in seen.before.items():
        assert without(seen.after[key], *volatile) == without(before, *volatile), key
    containers = seen.after[ds]["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["device-plugin"]


FORWARD = section("**Forward.**", "**Back.**")
BACK = section("**Back.**", "**The permanent variant.**")
PERMANENT = section("**The permanent variant.**", "The way back of this variant")
PERMANENT_BACK = section("The way back of this variant", "Nodes whose handshake")


def follow(
    lines: list[str],
    names: Names,
    control_plane: ControlPlane,
    kube: Kube,
    env: dict[str, str],
    folder: Path,
) -> None:
    """Each command as the page writes it but for `names`, in order."""
    tools = (control_plane.bin_dir, helm_binary().parent, Path(sys.executable).parent)
    shell = {**env, "PATH": ":".join(str(p) for p in tools) + ":/usr/bin:/bin"}
    assert lines[0] == "hami migrate check"
    for line in lines:
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
