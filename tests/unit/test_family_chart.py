"""The chart's list of the other device families' resources is the registry's: the webhook's
matchConditions and the extender's managedResources are rendered from it (the rendering is
checked with the real helm in tests/unit/test_helm_render.py)."""

from pathlib import Path

import yaml

from hami.engine.families.registry import FAMILIES

CHART = Path(__file__).resolve().parents[2] / "helm" / "hami"


def test_the_charts_family_resources_are_the_registrys() -> None:
    listed = yaml.safe_load((CHART / "families.yaml").read_text())["resources"]
    assert tuple(listed) == FAMILIES.other_resource_names()
