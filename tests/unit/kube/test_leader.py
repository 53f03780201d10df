from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from hami.kube.client import Kube
from hami.kube.leader import AlwaysLeader, Leadership, LeaseLeadership, NotLeading, is_holder


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
    term = leader.current()
    assert term is not None and term.active


def lease(holder: str, renew: str, duration: int = 15) -> dict[str, object]:
    return {
        "metadata": {"name": "hami-scheduler", "namespace": "ns"},
        "spec": {"holderIdentity": holder, "renewTime": renew, "leaseDurationSeconds": duration},
    }


@pytest.fixture
async def leadership() -> AsyncIterator[tuple[LeaseLeadership, list[float]]]:
    now = [100.0]
    kube = Kube(ApiClient(Configuration(host="http://127.0.0.1:9")))  # the watch is not run here
    yield (
        LeaseLeadership(kube, "ns", "hami-scheduler", "hami-0", grace=5.0, clock=lambda: now[0]),
        now,
    )
    await kube.close()


async def test_a_term_starts_after_the_grace_and_ends_on_release(
    leadership: tuple[LeaseLeadership, list[float]],
) -> None:
    lead, now = leadership
    lead.observe(lease("hami-0_abc", "t1"))
    assert lead.is_leader and lead.term == 1
    # The previous leader's last writes may still be in flight.
    assert lead.current() is None
    now[0] += 5.0
    term = lead.current()
    assert term is not None and term.active
    term.check()
    # kube-scheduler releases the Lease when it stops: the term ends at once.
    lead.observe(lease("", "t2"))
    assert not term.active and lead.current() is None
    with pytest.raises(NotLeading, match="term 1 ended"):
        term.check()


async def test_an_unrenewed_lease_ends_the_term_at_two_thirds_of_its_duration(
    leadership: tuple[LeaseLeadership, list[float]],
) -> None:
    lead, now = leadership
    lead.observe(lease("hami-0_abc", "t1"))
    now[0] += 9.9
    lead.observe(lease("hami-0_abc", "t1"))  # the same renewTime: no renewal seen
    assert lead.is_leader
    now[0] += 0.2  # 10.1 s since the last renewal: kube-scheduler's renewDeadline has passed
    lead.update()
    assert not lead.is_leader and lead.current() is None
    lead.observe(lease("hami-0_abc", "t2"))
    assert lead.is_leader and lead.term == 2


async def test_serving_waits_for_the_grace_to_end(
    leadership: tuple[LeaseLeadership, list[float]],
) -> None:
    lead, now = leadership
    assert await lead.serving(0.01) is None  # not leading: no wait at all
    lead.observe(lease("hami-0_abc", "t1"))
    assert await lead.serving(0.01) is None  # the grace outlasts the wait
    now[0] += 5.0
    served = await lead.serving(0.01)
    assert served is not None and served.number == 1
    lead.observe(lease("other_1", "t2"))
    assert await lead.serving(0.01) is None
