import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from hami.kube.leader import AlwaysLeader, Leadership, LeaseLeadership, NotLeading, is_holder
from tests.fakes.kubeapi import FakeKube, until


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
async def leadership() -> tuple[LeaseLeadership, list[float]]:
    now = [100.0]
    kube = FakeKube()  # the watch is not run here
    return (
        LeaseLeadership(kube, "ns", "hami-scheduler", "hami-0", grace=5.0, clock=lambda: now[0]),
        now,
    )


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


async def test_terms_follow_the_lease_through_its_watch() -> None:
    """The Lease as the API server holds it, watched: a term starts when the Lease names this
    replica and ends the moment the watch shows another holder."""
    api = FakeKube()
    api.add("leases", lease("hami-0_abc", "t1"))
    lead = LeaseLeadership(api, "ns", "hami-scheduler", "hami-0", grace=0.0)
    stop = asyncio.Event()
    running = asyncio.create_task(lead.run(stop))
    await until(lambda: lead.current() is not None)
    first = lead.current()
    assert first is not None and first.number == 1

    def hand_over(holder: str) -> Callable[[dict[str, Any]], None]:
        return lambda obj: obj["spec"].update(holderIdentity=holder, renewTime=holder)

    api.edit("leases", "hami-scheduler", hand_over("hami-1_def"), "ns")
    await until(lambda: not first.active)
    assert lead.current() is None and not lead.is_leader
    api.edit("leases", "hami-scheduler", hand_over("hami-0_ghi"), "ns")
    await until(lambda: lead.current() is not None)
    second = lead.current()
    assert second is not None and second.number == 2 and not first.active
    stop.set()
    await running
    assert not second.active  # a replica that stops leads no more
