"""The chart's list of the other device families' resources is the registry's: the webhook's
matchConditions and the extender's managedResources are rendered from it (the rendering is
checked with the real helm in tests/unit/test_helm_render.py)."""

from pathlib import Path

import yaml

from hami.engine.families.registry import GATED, Families, from_device_config, gated_members

CHART = Path(__file__).resolve().parents[2] / "helm" / "hami"


def test_the_charts_family_resources_are_the_registrys() -> None:
    listed = yaml.safe_load((CHART / "families.yaml").read_text())
    assert tuple(listed["resources"]) == from_device_config({}, ()).other_resource_names()
    assert sorted(listed["gated"]) == sorted(GATED)
    for name in GATED:
        members = Families(gated_members(name))
        assert tuple(listed["gated"][name]["resources"]) == members.other_resource_names()
        assert listed["gated"][name]["section"] == GATED[name]
