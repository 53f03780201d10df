"""HAMi's request-in-score rule in the family card sort (hami.engine.familyfit).

HAMi v2.10's ComputeScore (pkg/scheduler/policy/gpu_policy.go), run for every card before
each container is fitted, adds that container's request (a slot, its cores, its memory or its
percentage of the card's) to the score of a card only where the card's model equals the
request's type exactly: a Hygon plugin registering its cards as `DCU` gets the request counted,
one registering `DCU-Z100L` does not. The table below is built from that rule, by hand:

two DCU cards, 10 slots and 100 cores each, one slot and 10 cores used on each;
card a: 1000 MiB, 300 used; card b: 10000 MiB, 5000 used; a container asks one DCU with
10 cores and 400 MiB (or 10% of the card's memory, which ComputeScore counts even
beside a MiB value). Scores (10 x (slots + cores + memory)):

| model     | ask    | a                          | b                           |
|-----------|--------|----------------------------|-----------------------------|
| DCU-Z100L | any    | 10 x (.1+.1+.3) = 5.0      | 10 x (.1+.1+.5) = 7.0       |
| DCU       | 400MiB | 10 x (.2+.2+.7) = 11.0     | 10 x (.2+.2+.54) = 9.4      |
| DCU       | 10%    | 10 x (.2+.2+.4) = 8.0      | 10 x (.2+.2+.6) = 10.0      |

binpack takes the highest score, spread the lowest.
"""

import pytest

from hami.engine.familyfit import fit_families
from hami.engine.model import Card, DeviceInfo, FamilyRequest, NodeState, PodRequest, Usage
from hami.engine.policy import pod_options
from hami.engine.score import make_card
from tests.builders import FAMILIES


def cards(model: str) -> tuple[Card, ...]:
    return (
        make_card(DeviceInfo("a", 0, 10, 1000, 100, model), Usage(1, 300, 10)),
        make_card(DeviceInfo("b", 1, 10, 10000, 100, model), Usage(1, 5000, 10)),
    )


BY_MIB = FamilyRequest("DCU", 1, memreq=400, coresreq=10)
# A share beside a MiB value: ComputeScore counts the share.
BY_SHARE = FamilyRequest("DCU", 1, memreq=400, mem_percentage=10, coresreq=10)


@pytest.mark.parametrize(
    ("model", "ask", "policy", "want"),
    [
        ("DCU-Z100L", BY_MIB, "binpack", "b"),
        ("DCU-Z100L", BY_MIB, "spread", "a"),
        ("DCU", BY_MIB, "binpack", "a"),
        ("DCU", BY_MIB, "spread", "b"),
        ("DCU", BY_SHARE, "binpack", "b"),
        ("DCU", BY_SHARE, "spread", "a"),
    ],
)
def test_the_request_counts_in_the_score_of_cards_whose_model_is_the_type(
    model: str, ask: FamilyRequest, policy: str, want: str
) -> None:
    node = NodeState("n", (), 0.0, 0.0, 0.0, families={"DCU": cards(model)})
    request = PodRequest(app=(None,), families=((ask,),))
    opts = pod_options({"hami.io/gpu-scheduler-policy": policy})
    got = fit_families(node, request, opts, families=FAMILIES)
    assert got.devices is not None, got.reason
    assert [d.uuid for d in got.devices[0]] == [want]
