"""Lab 14 replayed on the real control plane: its node with the write-up's four cards, its
examples applied and the lab card read back."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tests import applog
from tests.e2e.kube import Kube, eventually, wait_for
from tests.e2e.labtext import EventRow, event_rows
from tests.reference.lab14 import (
    STEP_4,
    STEP_5,
    STEP_6_EVENTS,
    STEP_6_MUTEX,
    STEP_6_RELEASED,
    STEP_7,
    STEP_8_SCORES,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "lab14"

NODE = "gke-hami-policy-lab-default-pool-0c191cbd-fnwq"

UUIDS = (
    "GPU-77b9c63c-e3cb-8207-c355-5f65d684d2d8",
    "GPU-f147e096-f059-d618-77b4-890c70ef7468",
    "GPU-66116373-061e-a66b-28a3-c60c4877e16e",
    "GPU-3c5f3637-e911-b226-7a4c-52da87c38aff",
)


def lab_card(kube: Kube, ns: str) -> str:
    """The lab's helper, verbatim but for the namespace."""
    return kube(
        "get",
        "pods",
        "-n",
        ns,
        "-l",
        "hami.run/lab-14",
        "--no-headers",
        "-o",
        r"custom-columns=POD:.metadata.name,CARD:.metadata.annotations.hami\.io/vgpu-devices-allocated",
    ).stdout


Apply = Callable[[Kube, str, str], None]

# (lab-card's output, pod -> kube-scheduler's reason for each pod that waits): what a test checks
# at each point the lab prints its table.
Seen = Callable[[str, dict[str, str]], None]


def apply(kube: Kube, ns: str, name: str) -> None:
    kube("apply", "-n", ns, "-f", str(EXAMPLES / name))


def wait_ready(kube: Kube, ns: str, *pods: str) -> None:
    kube(
        "wait",
        "-n",
        ns,
        "--for=condition=Ready",
        *(f"pod/{p}" for p in pods),
        "--timeout=5m",
        timeout=330,
    )


def replay(
    kube: Kube,
    ns: str,
    apply: Apply,
    restart: Callable[[], None],
    app_log: Callable[[], str],
    seen: Seen | None = None,
) -> None:
    """Steps 4 to 8; `apply` puts one of the lab's files into the cluster, `restart` restarts
    the scheduler halfway through Step 7, `app_log` is the log of the one that placed the pods,
    `seen`, where given, is called wherever the lab prints its table."""

    def check(table: str, pending: dict[str, str]) -> None:
        if seen is not None:
            seen(table, pending)

    def table(expected: str) -> None:
        assert lab_card(kube, ns) == expected
        check(expected, {})

    # Step 4: default spread.
    apply(kube, ns, "01-spread-pods.yaml")
    wait_ready(kube, ns, "policy-spread-a", "policy-spread-b")
    table(STEP_4)

    # Step 5: binpack stacks onto the busiest card.
    apply(kube, ns, "02-binpack-pods.yaml")
    wait_ready(kube, ns, "policy-binpack-a", "policy-binpack-b")
    table(STEP_5)

    # Step 6: mutex takes the idle cards, then blocks.
    apply(kube, ns, "03-mutex-pods.yaml")
    wait_ready(kube, ns, "policy-mutex-a", "policy-mutex-b")
    table(STEP_6_MUTEX)

    apply(kube, ns, "04-mutex-blocked.yaml")
    message = wait_for(
        lambda: kube.pod_scheduled_message(ns, "policy-mutex-c"),
        timeout=60,
        what="policy-mutex-c to be reported unschedulable",
    )
    assert message is not None
    assert "0/1 nodes are available: 1 4/4 ExclusiveDeviceAllocateConflict." in message
    assert kube.pod(ns, "policy-mutex-c")["status"]["phase"] == "Pending"

    # The lab's Events rows, Age and counts aside: kube-scheduler's FailedScheduling and HAMi's
    # FilteringFailed for the node's reason, nothing else (tests/e2e/labtext.py).
    def events() -> set[EventRow]:
        return event_rows(kube("describe", "pod", "-n", ns, "policy-mutex-c").stdout)

    def lab_rows() -> None:
        assert events() == event_rows(STEP_6_EVENTS)

    eventually(lab_rows, timeout=30)
    time.sleep(2)  # and nothing else follows them
    lab_rows()
    # What lab-card would print now: the waiting pod without a card.
    check(
        lab_card(kube, ns),
        {"policy-mutex-c": "0/1 nodes are available: 1 4/4 ExclusiveDeviceAllocateConflict."},
    )

    kube("delete", "-n", ns, "pod", "policy-spread-b", timeout=90)
    wait_ready(kube, ns, "policy-mutex-c")
    table(STEP_6_RELEASED)

    # Step 7: start clean, as the lab does.
    kube("delete", "-n", ns, "pods", "-l", "hami.run/lab-14", timeout=120)
    kube(
        "wait",
        "-n",
        ns,
        "--for=delete",
        "pod",
        "-l",
        "hami.run/lab-14",
        "--timeout=2m",
        timeout=130,
    )

    apply(kube, ns, "05-composed-tenant.yaml")
    wait_ready(kube, ns, "policy-tenant")

    # A restart in the middle: the tenant's card must still count as used.
    restart()

    apply(kube, ns, "06-composed-pods.yaml")
    wait_ready(kube, ns, "policy-combined-a", "policy-combined-b")
    apply(kube, ns, "07-binpack-contrast.yaml")
    wait_ready(kube, ns, "policy-binpack-solo")
    table(STEP_7)

    # Step 8: the binpack-solo pass logged the write-up's scores.
    scores = [r["msg"] for r in applog.records(app_log()) if "computer score" in r["msg"]]
    assert "".join(f"{msg}\n" for msg in scores[-4:]) == STEP_8_SCORES
