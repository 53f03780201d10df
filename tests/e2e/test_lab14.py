"""Lab 14, Steps 4 to 8, on a real kube-apiserver and kube-scheduler, as the write-up runs it.

kubectl applies examples/lab14/ exactly as the lab does, waits for Ready as the
lab does, and every `lab-card` output must equal the write-up's. Halfway
through Step 7 our process is restarted: the placements after it prove the
cache is rebuilt from the API server alone.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e.lab14 import NODE, UUIDS, apply, replay

from .cluster import ControlPlane, NodeSim
from .kube import Kube
from .nodespec import t4_node
from .status import check_status

pytestmark = pytest.mark.e2e


def test_lab14_replay_with_restart(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    nodesim(t4_node(NODE, UUIDS))
    # At every table the lab prints, `hami status` shows the same (tests/e2e/status.py).
    replay(
        kube,
        namespace,
        apply,
        control_plane.restart_app,
        lambda: control_plane.app_log.read_text(),
        lambda table, pending: check_status(kube, namespace, table, pending),
    )
