"""The node policy crosses the family seam by name: each scorer keyed by it is one table with an
entry per policy, so that a policy added to the vocabulary without its scorers fails here
(and, where it reaches one, raises KeyError) instead of being scored as another policy."""

from collections.abc import Mapping

import pytest

from hami.engine.decide import ORDERS
from hami.engine.families.base import FitPod, NodeFacts, node_score
from hami.engine.families.metax import gpu, sgpu
from hami.engine.families.metax.config import GPU_LOSSES, GPU_SCORES
from hami.engine.model import ContainerDevice
from hami.engine.policy import NodePolicy, PolicyError, parse_node_policy

TABLES: dict[str, Mapping[NodePolicy, object]] = {
    "hami.engine.decide.ORDERS": ORDERS,
    "hami.engine.families.metax.gpu.LINKS": gpu.LINKS,
    "hami.engine.families.metax.sgpu._WEIGHT": sgpu._WEIGHT,
}


@pytest.mark.parametrize("name", TABLES)
def test_every_node_policy_has_its_scorer(name: str) -> None:
    assert set(TABLES[name]) == set(NodePolicy)


def test_an_unknown_node_policy_is_refused_by_name() -> None:
    with pytest.raises(PolicyError, match="unknown node scheduler policy 'leastallocated'"):
        parse_node_policy("leastallocated")


def test_a_family_is_scored_under_the_policy_it_is_given() -> None:
    """The MetaX GPU reads the link losses under binpack and the link scores under spread."""
    facts = NodeFacts(
        "n",
        annotations={GPU_LOSSES: '{"1": 100}', GPU_SCORES: '{"1": 300}'},
    )
    one_card = ((ContainerDevice("GPU-0", 0, 100, "Metax-GPU"),),)
    scores = {p: node_score(gpu.MetaxGpu(), [], one_card, FitPod(), facts, p) for p in NodePolicy}
    assert scores == {NodePolicy.BINPACK: 1900.0, NodePolicy.SPREAD: 1700.0}
