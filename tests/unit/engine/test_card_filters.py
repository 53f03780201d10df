"""A card filter is written in one place (hami.engine.policy.CARD_RULES) and every family
asks it: a filter added there alone turns cards away in each walked family's fit and in
NVIDIA's checks, and NVIDIA's summaries leave a filter they do not keep apart to the card by
card fit. The filter here, `fenced` (refusing every card), exists only in this test."""

from dataclasses import replace
from typing import cast

import pytest

from hami.engine.checks import slot_verdict
from hami.engine.families.base import Family, FitPod, NodeFacts
from hami.engine.model import Card, ContainerRequest, PodRequest, Usage
from hami.engine.nvidianames import NVIDIA
from hami.engine.policy import CARD_RULES, CardFilter, pod_options
from hami.engine.summarycheck import summary_check
from tests.builders import FAMILIES, t4
from tests.families_samples import SAMPLE_ALLOCATABLE, SAMPLE_LABELS, SAMPLE_NODE

FENCED = cast(CardFilter, "fenced")
REASON = "CardFenced"


@pytest.fixture(autouse=True)
def fenced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(CARD_RULES, FENCED, (lambda used: True, REASON))


def _cards(family: Family) -> list[Card]:
    kind = family.wire.type
    facts = NodeFacts("n", SAMPLE_ALLOCATABLE.get(kind, {}), SAMPLE_LABELS.get(kind, {}))
    infos = family.decode_node(SAMPLE_NODE.get(kind, {}), facts)
    assert infos, kind
    return [Card(i, Usage(), 0.0) for i in infos]


WALKED = sorted(t for t in FAMILIES.walked_by_type if t in SAMPLE_NODE)


@pytest.mark.parametrize("kind", [NVIDIA, *WALKED])
def test_each_family_fit_asks_the_shared_filter(kind: str) -> None:
    family = FAMILIES.by_type()[kind]
    cards = [Card(t4(i), Usage(), 0.0) for i in range(2)] if kind == NVIDIA else _cards(family)
    names = family.wire.resources
    request = family.container_request({"name": "c", "resources": {"limits": {names.count: 1}}})
    assert request is not None
    assert family.fit(cards, request, FitPod(), ()).devices is not None, "fits unfiltered"
    got = family.fit(cards, request, FitPod(filters=frozenset({FENCED})), ())
    assert got.devices is None
    if kind != "kunlun":  # whole XPUs: HAMi names the topology that found too few, not why
        assert REASON in got.reason


def test_nvidia_checks_ask_the_shared_filter() -> None:
    card = Card(t4(0), Usage(), 0.0)
    plain = pod_options({})
    policy = replace(plain.gpu_policy, card_filters=frozenset({FENCED}))
    opts = replace(plain, gpu_policy=policy)
    assert slot_verdict(card, plain) is None
    assert slot_verdict(card, opts) == REASON
    request = PodRequest(app=(ContainerRequest(1, 1000),))
    assert summary_check(request, plain) is not None
    assert summary_check(request, opts) is None
