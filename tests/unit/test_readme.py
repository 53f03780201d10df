"""The README's commands do what the README says they do."""

from __future__ import annotations

import ast
import re
import shlex
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
import yaml

from tests.e2e.transcript import load
from tests.unit.test_helm_render import (
    EXTENDER,
    LAB14_STEP3,
    REPO_ROOT,
    container,
    helm,
    template_args,
)

README = (REPO_ROOT / "README.md").read_text()


def sh_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README, flags=re.S)


def command(starting: str) -> list[str]:
    """The README's one command that starts with ``starting``, as the shell splits it."""
    found = [
        shlex.split(line.replace("\\\n", " "), comments=True)
        for block in sh_blocks()
        for line in re.split(r"(?<!\\)\n", block)
        if line.startswith(starting)
    ]
    assert len(found) == 1, (starting, found)
    return found[0]


def test_hamis_install_line_is_lab14s_but_for_the_chart_folder_and_its_version() -> None:
    ours = command("helm install hami ./helm/hami")
    lab = shlex.split(LAB14_STEP3.replace("\\\n", " "))
    # Helm ignores --version for a chart folder: the README leaves it out and says why.
    i = lab.index("--version")
    assert ours == [*lab[:3], "./helm/hami", *lab[4:i], *lab[i + 2 :]]
    assert "Helm ignores `--version` for a chart folder" in README.replace("\n", " ")


@pytest.mark.e2e  # renders with helm, which the e2e tier builds
def test_the_chain_default_command_sets_the_chain() -> None:
    argv = command("helm upgrade hami-py ./helm/hami -n hami-system --reuse-values")
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    docs = [d for d in yaml.safe_load_all(helm(*template_args(*sets)).stdout) if d]
    assert "--gpu-scheduler-policy=mutex,binpack" in container(docs, EXTENDER)["args"]


def _third_party_imports(folder: Path) -> set[str]:
    mods: set[str] = set()
    for path in folder.rglob("*.py"):
        if "_logs" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                mods.add(node.module.split(".")[0])
    ours = {"hami", "webhook", "scheduler", "certs", "tests", "api_pb2", "api_pb2_grpc"}
    return {m for m in mods - ours if m not in sys.stdlib_module_names}


def test_what_the_tests_import_is_in_the_dev_extras_the_readme_names() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    declared = {
        re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower().replace("_", "-")
        for r in [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    }
    dists = packages_distributions()
    missing = {
        m: dists.get(m)
        for m in _third_party_imports(REPO_ROOT / "tests")
        if not {d.lower().replace("_", "-") for d in dists.get(m, [])} & declared
    }
    assert missing == {}, "imported by the tests but in no extra of pyproject.toml"
    assert "pip install -e '.[dev]'" in README


def _commands(text: str) -> list[str]:
    """Shell commands, one per entry: continuation lines joined, comments and blanks left out."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [
        " ".join(line.split())
        for line in joined.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_the_readmes_lab12_commands_are_the_ones_the_node_tier_replays() -> None:
    """Every command of the README's Lab 12 section (bar creating the cluster) runs in
    tests/e2e/labs/lab12.yaml's replay, with the lab's paths for examples/lab12/."""
    section = README[README.index("### Nodes without HAMi's device plugin (Lab 12)") :]
    section = section[: section.index("* **Registration**")]
    readme = [
        c
        for block in re.findall(r"```sh\n(.*?)```", section, flags=re.S)
        for c in _commands(block)
        if not c.startswith("gcloud ")
    ]
    lab12 = load("lab12")
    edits = [e for e in lab12.edits if "TEST_NODE" not in e.lab]  # the README keeps the lab's
    replayed = set()
    for step in lab12.steps:
        text = step.run + "\n" + step.show
        for edit in edits:
            text = text.replace(edit.lab, edit.ours)
        lab_path = "tutorials/labs/examples/12-kai-scheduler-hami-gke/"
        replayed.update(_commands(text.replace(lab_path, "examples/lab12/")))
    assert readme and [c for c in readme if c not in replayed] == []
