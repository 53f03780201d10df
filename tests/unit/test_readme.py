"""The commands of the README and of docs/ do what the pages say they do."""

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

from tests.builders.chart import (
    EXTENDER,
    LAB14_STEP3,
    REPO_ROOT,
    container,
    helm,
    template_args,
)
from tests.e2e.transcript import load
from tests.unit.docs import ALL, DOCS, PAGES, README, command_lines

GKE = "REGION-docker.pkg.dev/PROJECT/REPO"  # the GKE install's Artifact Registry


def command(starting: str) -> list[str]:
    """The pages' one command that starts with ``starting`` (it may be shown on several pages,
    always the same), as the shell splits it."""
    found = {
        tuple(shlex.split(line, comments=True))
        for line in command_lines()
        if line.startswith(starting)
    }
    assert len(found) == 1, (starting, found)
    return list(found.pop())


def test_hamis_install_line_is_lab14s_but_for_the_chart_folder_and_its_version() -> None:
    ours = command("helm install hami ./helm/hami")
    lab = shlex.split(LAB14_STEP3.replace("\\\n", " "))
    # Helm ignores --version for a chart folder: the README leaves it out and says why.
    i = lab.index("--version")
    assert ours == [*lab[:3], "./helm/hami", *lab[4:i], *lab[i + 2 :]]
    assert "Helm ignores `--version` for a chart folder" in PAGES["docs/install.md"].replace(
        "\n", " "
    )


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
    ours = {"hami", "tests", "api_pb2", "api_pb2_grpc"}
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
    assert "pip install -e '.[dev]'" in PAGES["docs/development.md"]


def _commands(text: str) -> list[str]:
    """Shell commands, one per entry: continuation lines joined, comments and blanks left out."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [
        " ".join(line.split())
        for line in joined.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_the_lab12_commands_are_the_ones_the_node_tier_replays() -> None:
    """Every command of docs/labs.md's Lab 12 section (bar creating the cluster) runs in
    tests/e2e/labs/lab12.yaml's replay, with the lab's paths for examples/lab12/."""
    labs = PAGES["docs/labs.md"]
    section = labs[labs.index("## Nodes without HAMi's device plugin (Lab 12)") :]
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


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    prose = re.sub(r"^ *```.*?^ *```", "", text, flags=re.S | re.M)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", prose, flags=re.M)}


def test_every_link_between_the_pages_leads_to_a_file_and_heading_that_exist() -> None:
    broken = []
    for name, text in PAGES.items():
        here = (REPO_ROOT / name).parent
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (here / path).resolve() if path else REPO_ROOT / name
            if not file.exists() or (anchor and anchor not in _anchors(file.read_text())):
                broken.append((name, target))
    assert broken == []


def test_the_readme_stays_short_and_links_every_page() -> None:
    assert len(README.splitlines()) <= 200
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)", README))
    assert linked == {p.name for p in DOCS.glob("*.md")}


def test_every_namespace_and_object_name_is_the_install_pages() -> None:
    """The pages install release hami-py into hami-system; every command that names a namespace
    or one of the release's objects says the same, bar the commands on HAMi's own release
    (`hami` in kube-system): Lab 14's install line (compared with the lab's above) and the
    migration page's steps on HAMi's scheduler and webhook, which never name ours."""
    lab14 = "helm install hami ./helm/hami -n kube-system"
    hamis = {lab14} | {
        line
        for line in command_lines(PAGES["docs/migrate-from-hami.md"])
        if "kube-system" in line and "hami-py" not in line
    }
    assert len(hamis) >= 4
    wrong = []
    for line in command_lines():
        if any(line.startswith(h) for h in hamis):
            continue
        # -n or --namespace of a kubectl or helm call (tail -n of a pipe is not one).
        for ns in re.findall(r"\b(?:kubectl|helm) [^|;]*?(?:-n|--namespace)[ =]([\w-]+)", line):
            if ns != "hami-system":
                wrong.append(line)
        for name in re.findall(r"\b(?:deploy|ds|secret)/([\w-]+)", line):
            if not name.startswith("hami-py-"):
                wrong.append(line)
    assert lab14 in ALL.replace("\\\n", " ")
    assert wrong == []


def test_every_hami_command_shown_is_one_the_cli_takes() -> None:
    from hami.cli import parser

    shown = [line for line in command_lines() if line.startswith("hami ") and "[" not in line]
    assert len(shown) >= 8
    for line in shown:
        argv = [a for a in shlex.split(line, comments=True)[1:] if a != "..."]
        args = parser().parse_args(argv)
        scenario = getattr(args, "scenario", "")
        if scenario and scenario.endswith(".yaml") and "/" in scenario:
            assert (REPO_ROOT / scenario).is_file(), line


def test_every_image_build_tags_what_the_chart_runs() -> None:
    """`<registry>/` + the chart's image.repository and appVersion: so
    `--set image.repository=<registry>/hami-py` is all an install needs."""
    chart = yaml.safe_load((REPO_ROOT / "helm" / "hami" / "Chart.yaml").read_text())
    values = yaml.safe_load((REPO_ROOT / "helm" / "hami" / "values.yaml").read_text())
    wanted = f"<registry>/{values['image']['repository']}:{chart['appVersion']}"
    builds = [
        line
        for line in command_lines()
        if re.match(r"(docker (buildx )?build|buildah (bud|build)|podman build) ", line)
    ]
    assert len(builds) >= 4
    for line in builds:
        argv = shlex.split(line.split("&&")[0], comments=True)
        tags = [argv[i + 1] for i, a in enumerate(argv) if a in ("-t", "--manifest")]
        assert tags and all(t in (wanted, wanted.replace("<registry>", GKE)) for t in tags), line
    assert "--set image.repository=<registry>/hami-py" in ALL
