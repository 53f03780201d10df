"""A family's own node lock on the real control plane: Cambricon's `cambricon.com/dsmlu.lock`.

HAMi v2.10 takes it for a pod whose containers ask Cambricon MLUs (a bare RFC 3339 time; a
bind meeting one younger than 2 minutes fails, an older one is taken over) and removes it when
the bind fails; Cambricon's dynamic-sMLU device plugin removes it after Allocate. Here the node
simulator is that plugin, as a test double (tests/e2e/nodesim.py: it removes the lock after
each MLU pod's Allocate, whoever took it, `allocate_delay` seconds after the pod is bound), and
a bind meeting a held lock waits for it (docs/binding.md), as ours does for HAMi's own lock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from hami.service.nodelock.wire import decode_node_lock
from tests import applog
from tests.builders import FAMILIES

from .cluster import AS_PLUGIN, AS_SCHEDULER, ControlPlane, NodeSim
from .kube import Kube, wait_for
from .nodespec import family_node
from .test_families import manifest

pytestmark = pytest.mark.e2e

MLU = FAMILIES.by_type()["MLU"]
KEY = MLU.wire.lock_name  # cambricon.com/dsmlu.lock
WAITING = "node lock held, waiting for it"


def mlu_pod(name: str) -> str:
    return manifest(name, MLU)


def node_lock(kube: Kube, node: str) -> str | None:
    annotations: dict[str, str] = kube.get("node", node)["metadata"].get("annotations") or {}
    assert "hami.io/mutex.lock" not in annotations  # HAMi's own lock is not Cambricon's
    return annotations.get(KEY)


def logged(control_plane: ControlPlane, msg: str, namespace: str, pod: str) -> list[Any]:
    text = control_plane.app_log.read_text(errors="replace")
    return applog.about(text, msg=msg, namespace=namespace, pod=pod, lock=KEY)


def test_a_cambricon_bind_takes_its_lock_the_plugin_removes_it_and_a_bind_meeting_it_waits(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
) -> None:
    # The plugin double allocates 10 s after the bind: the lock is held that long.
    node = replace(family_node("mlu-lock", MLU), allocate_delay=10.0)
    nodesim(node)

    kube.apply(mlu_pod("first"), namespace)
    held = wait_for(lambda: node_lock(kube, node.name), timeout=60, what="the Cambricon lock")
    assert isinstance(held, str)
    taken, holder_ns, holder = decode_node_lock(held)  # a bare time, naming no pod
    assert (holder_ns, holder) == (None, None) and taken.tzinfo is not None
    assert abs((datetime.now(UTC) - taken).total_seconds()) < 120

    # A second MLU pod, bound to the node while the first one's Allocate is still to come: its
    # bind waits for the plugin to remove the lock (HAMi's fails at once), then takes it.
    kube.apply(mlu_pod("second"), namespace)
    wait_for(
        lambda: logged(control_plane, WAITING, namespace, "second"),
        timeout=60,
        what="the second bind to wait for the lock",
    )
    kube.wait_ready(namespace, ["first", "second"], timeout=120)
    failed = [e for e in kube.pod_events(namespace, "second") if e.get("reason") == "BindingFailed"]
    assert failed == [], failed
    assert kube.pod(namespace, "second")["spec"]["nodeName"] == node.name
    # Removed again after the second pod's Allocate.
    wait_for(lambda: node_lock(kube, node.name) is None, timeout=60, what="the lock removed")


def test_a_failed_cambricon_bind_gives_its_lock_back(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    nodesim: Callable[..., NodeSim],
) -> None:
    node = family_node("mlu-lock-fail", MLU)
    nodesim(node)
    # The lock as a bind elsewhere leaves it until the plugin's Allocate: this pod's bind waits.
    held = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube("annotate", *AS_SCHEDULER, "node", node.name, f"{KEY}={held}")
    kube.apply(mlu_pod("doomed"), namespace)
    wait_for(
        lambda: logged(control_plane, WAITING, namespace, "doomed"),
        timeout=60,
        what="the bind to wait for the lock",
    )
    # The pod goes while its bind waits; then the plugin removes the lock. The bind takes the
    # lock, its Binding finds no pod, and it gives the lock back.
    kube("delete", "pod", "doomed", "-n", namespace, "--wait=true", "--timeout=30s")
    kube("annotate", *AS_PLUGIN, "node", node.name, f"{KEY}-")
    wait_for(
        lambda: logged(control_plane, "node lock released", namespace, "doomed"),
        timeout=60,
        what="the failed bind to release its lock",
    )
    assert node_lock(kube, node.name) is None
