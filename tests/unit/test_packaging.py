"""The wheel installs one top-level package, `hami`: the adapters and certificates, kept in
their own folders in the repository, go in as hami.webhook, hami.extender and hami.certs
(pyproject.toml's package-dir), so no other distribution's `scheduler` or `certs` meets ours."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.builders.chart import REPO_ROOT

FOLDERS = {"webhook": "hami/webhook", "scheduler": "hami/extender", "certs": "hami/certs"}


def test_the_wheel_holds_hami_alone_with_the_folders_inside(tmp_path: Path) -> None:
    # The build backend already in the environment (no network), as `pip wheel .` runs it.
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--no-index", "-w", str(tmp_path), str(REPO_ROOT)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("hami_py-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"hami", wheel.name.split("-py3")[0] + ".dist-info"}
    for folder, installed in FOLDERS.items():
        ours = {p.name for p in (REPO_ROOT / folder).glob("*.py")}
        assert {
            n.removeprefix(installed + "/") for n in names if n.startswith(installed + "/")
        } >= ours


def test_nothing_imports_the_folders_by_their_old_names() -> None:
    old = {"webhook", "scheduler", "certs"}
    found = []
    for top in ("hami", "tests", "scripts", *FOLDERS):
        for path in (REPO_ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    mods = [node.module or ""]
                else:
                    continue
                found += [(str(path), m) for m in mods if m.split(".")[0] in old]
    assert found == []


def test_the_installed_names_resolve_to_the_folders() -> None:
    import hami.certs.tls
    import hami.extender.routes
    import hami.webhook.routes

    for module, folder in (
        (hami.webhook.routes, "webhook"),
        (hami.extender.routes, "scheduler"),
        (hami.certs.tls, "certs"),
    ):
        assert Path(str(module.__file__)).resolve().parent == REPO_ROOT / folder
