"""The chart's NOTES.txt as `helm install` prints it: rendered through a copy of the chart in
which the notes are an ordinary template (`helm template` leaves NOTES.txt out)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.unit.test_helm_render import CHART, KUBE_VERSION, helm

pytestmark = pytest.mark.e2e  # renders with helm, which the e2e tier builds


def notes(tmp_path: Path, namespace: str, *sets: str) -> str:
    chart = tmp_path / "hami"
    shutil.copytree(CHART, chart)
    text = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "NOTES.txt").unlink()
    (chart / "templates" / "_notes.tpl").write_text(
        '{{- define "test.notes" -}}\n' + text + "{{- end }}\n"
    )
    (chart / "templates" / "notes.yaml").write_text(
        'kind: Notes\ntext: {{ include "test.notes" . | toJson }}\n'
    )
    args = ["template", "hami-py", str(chart), "-n", namespace, "--kube-version", KUBE_VERSION]
    for value in sets:
        args += ["--set", value]
    out = helm(*args, "--show-only", "templates/notes.yaml").stdout
    return str(yaml.safe_load(out)["text"])


@pytest.mark.parametrize(
    ("namespace", "sets", "excluded"),
    [
        ("kube-system", (), "but kube-system and those"),
        ("hami-system", (), "but kube-system, hami-system and those"),
        (
            "hami-system",
            ("webhook.excludeNamespaces={batch}",),
            "but kube-system, hami-system, batch and those",
        ),
    ],
)
def test_the_notes_name_each_namespace_left_out_once(
    tmp_path: Path, namespace: str, sets: tuple[str, ...], excluded: str
) -> None:
    text = " ".join(notes(tmp_path, namespace, *sets).split())
    assert "kube-system and kube-system" not in text
    assert f"schedulerName hami-scheduler in every namespace {excluded}" in text, text
