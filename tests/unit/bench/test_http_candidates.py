"""The node names `hami bench --http` sends: every node, or kube-scheduler's default share."""

import pytest

from hami.bench.http import ALL, SHARE, candidates, feasible_to_find


@pytest.mark.parametrize(
    ("nodes", "share"),
    # 50 % less one per 125 nodes, at least 5 % and 100 nodes (numFeasibleNodesToFind).
    [(50, 50), (100, 100), (200, 100), (1000, 420), (5000, 500), (20_000, 1000)],
)
def test_the_share_is_kube_schedulers_number_of_feasible_nodes_to_find(
    nodes: int, share: int
) -> None:
    assert feasible_to_find(nodes) == share


def test_each_request_starts_where_the_last_one_stopped_and_wraps_around() -> None:
    names = [f"n{i:03d}" for i in range(300)]  # a share of 144
    assert candidates(names, ALL, 7) is names
    first, second, third = (candidates(names, SHARE, i) for i in range(3))
    assert first == names[:144] and second == names[144:288]
    assert third == names[288:] + names[:132]
