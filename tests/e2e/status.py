"""`hami status` run as a user runs it, against a live API server, and checked against what
Lab 14's `lab-card` helper prints at the same moment."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import orjson

from .kube import Kube


def hami_status(kube: Kube, *args: str) -> str:
    argv = [sys.executable, "-m", "hami", "status", "--kubeconfig", str(kube.kubeconfig), *args]
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env=kube.env, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def check_status(kube: Kube, namespace: str, table: str, pending: Mapping[str, str]) -> None:
    """`table` is lab-card's output now; `pending` maps each pod that waits to the sentence
    kube-scheduler gives for it. `hami status` must show the namespace's pods exactly as that
    table, every card holding exactly the table's pods with their memory and slots counted, and
    the waiting pods with their reason."""
    text = hami_status(kube)
    pods = text.split(f"PODS {namespace}\n", 1)[1].split("\n\n", 1)[0] + "\n"
    assert pods == table, text

    doc: dict[str, Any] = orjson.loads(hami_status(kube, "--json"))
    expected: dict[str, list[tuple[str, int, int]]] = {}  # card -> (pod, MiB, cores)
    for line in table.splitlines():
        name, allocated = line.split()
        if allocated != "<none>":
            for container in allocated.rstrip(";").split(";"):
                uuid, _, memory, cores = container.rstrip(":").split(",")
                expected.setdefault(uuid, []).append((name, int(memory), int(cores)))
    for node in doc["nodes"]:
        for card in node["cards"]:
            held = sorted(
                (h["pod"], h["memory"], h["cores"])
                for h in card["pods"]
                if h["namespace"] == namespace
            )
            assert held == sorted(expected.pop(card["uuid"], [])), card
            if all(h["namespace"] == namespace for h in card["pods"]):
                assert card["memory_mib"]["allocated"] == sum(m for _, m, _ in held), card
                assert card["cores_percent"]["allocated"] == sum(c for _, _, c in held), card
                assert card["slots"]["used"] == len(held), card
    assert expected == {}, f"cards hami status does not list: {expected}"

    waiting = {p["name"]: p["pending"] for p in doc["pending"] if p["namespace"] == namespace}
    assert waiting.keys() == pending.keys(), waiting
    for name, reason in pending.items():
        assert reason in waiting[name], waiting
        assert f"  {namespace}/{name}: {waiting[name]}" in text.splitlines()
