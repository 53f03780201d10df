import pytest

from hami.kube.leader import AlwaysLeader, Leadership, is_holder


@pytest.mark.parametrize(
    ("holder", "identity", "leads"),
    [
        ("hami-0_6c7b2d3e-1f", "hami-0", True),
        ("hami-0", "hami-0", True),
        ("hami-1_6c7b2d3e-1f", "hami-0", False),
        ("hami-10_6c7b2d3e-1f", "hami-1", False),
        ("", "hami-0", False),
        (None, "hami-0", False),
    ],
)
def test_is_holder(holder: str | None, identity: str, leads: bool) -> None:
    assert is_holder(holder, identity) is leads


def test_always_leader() -> None:
    leader: Leadership = AlwaysLeader()
    assert leader.is_leader
    assert leader.term == 1
    assert leader.became_leader.is_set()
