"""What `hami explain` and `hami status` say about MIG cards: the profile and placement a pod
holds or would get, and, when none fits, what every placement overlaps."""

from typing import Any

from hami.engine import nvidianames as names
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.service.explain import explain
from hami.service.status import render_text, status
from tests.unit.mig_cluster import GPU, Cluster, gpu, pod


def worked_example() -> tuple[Cluster, list[dict[str, Any]]]:
    c = Cluster()
    placed = [pod("a", gpu(15000)), pod("b", gpu(4000))]
    for p in placed:
        c.place(p)
    return c, placed


def test_a_pending_pod_is_told_what_each_placement_overlaps() -> None:
    c, _ = worked_example()
    lines = explain(c.cache, pod("c", gpu(15000)), Defaults(), ResourceDefaults())
    assert lines[1:] == [
        "  0/1 nodes are available: 1 1/1 CardMigTopologyInfeasible.",
        "  a100: 1/1 CardMigTopologyInfeasible",
        f"    card 0 {GPU} (MIG): 3g.20gb@4-7, 1g.5gb@3",
        "      for 15000 MiB and 0 % of the cores: 3g.20gb@4-7 overlaps 3g.20gb@4-7; "
        "3g.20gb@0-3 overlaps 1g.5gb@3 | 7g.40gb@0-7 overlaps 3g.20gb@4-7, 1g.5gb@3",
    ]


def test_a_pod_that_fits_is_told_its_profile_and_placement() -> None:
    c, _ = worked_example()
    lines = explain(c.cache, pod("d", gpu(4000)), Defaults(), ResourceDefaults())
    assert lines[-1] == f"  MIG: container 0 card {GPU} would get 1g.5gb@2"


def test_a_bound_pod_shows_its_instance_and_whether_the_plugin_made_it() -> None:
    c, (a, _) = worked_example()
    assert f"  MIG: container 0 card {GPU}: 3g.20gb@4-7, not created by the device plugin yet" in (
        explain(c.cache, a, Defaults(), ResourceDefaults())
    )
    made = a["metadata"]["annotations"][names.MIG_ALLOCATIONS].replace(
        '"size":4}}', '"size":4},"migUUID":"MIG-1","gpuInstanceID":1,"computeInstanceID":0}'
    )
    a["metadata"]["annotations"][names.MIG_ALLOCATIONS] = made
    assert (
        f"  MIG: container 0 card {GPU}: 3g.20gb@4-7, instance MIG-1 (GPU instance 1, "
        "compute instance 0)" in explain(c.cache, a, Defaults(), ResourceDefaults())
    )


def test_status_shows_each_pods_instance_and_the_lab_card_column() -> None:
    c, placed = worked_example()
    text = render_text(status(c.cache, placed, ResourceDefaults()))
    assert any("ns/a 3g.20gb@4-7 ns/b 1g.5gb@3" in line for line in text)
    assert any(line.startswith("a ") and line.endswith("3g.20gb@4-7") for line in text)
