"""The chart's NOTES.txt as `helm install` prints it: rendered through a copy of the chart in
which the notes are an ordinary template (`helm template` leaves NOTES.txt out)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.builders.chart import notes

pytestmark = pytest.mark.e2e  # renders with helm, which the e2e tier builds


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
