"""--dra-mode and --dra-device-classes: the admission service's DraConfig, and the leader's
placer of the pods it gates (docs/dra.md)."""

from collections.abc import Callable

from hami.engine.dra.config import DraConfig, DraConfigError, parse_classes
from hami.engine.families.registry import Families
from hami.kube.api import KubeAPI
from hami.kube.leader import Leadership
from hami.runtime.config import ConfigError, Settings
from hami.service.draplacer import DraPlacer
from hami.service.placement import FilterOutcome, Placement


def dra_config(s: Settings, families: Families) -> DraConfig:
    """The DRA mode the webhook runs in; a setting it cannot use stops the process."""
    try:
        config = DraConfig(
            s.dra_mode, parse_classes(s.dra_device_classes, frozenset(families.by_type()))
        )
    except DraConfigError as e:
        raise ConfigError(str(e)) from None
    if config.on and s.node_integration != "hami-device-plugin":
        raise ConfigError(
            f"--dra-mode {s.dra_mode} needs --node-integration hami-device-plugin: in "
            f"{s.node_integration} mode a GPU container waits for limits that bind writes, and "
            "the DRA pods are not bound by this scheduler; the DRA driver delivers their limits"
        )
    return config


def dra_placer(
    dra: DraConfig,
    kube: KubeAPI,
    placement: Placement,
    leadership: Leadership,
    scheduler_name: str,
    report: Callable[[FilterOutcome], None],
) -> DraPlacer | None:
    """The placer, in DRA mode: it acts while this replica leads, over the cards DRA drivers
    publish, with the policies and counts of `placement` (docs/dra.md, "Which card")."""
    if not dra.on:
        return None
    cache = placement.cache
    return DraPlacer(
        kube,
        placement.over_dra(),
        dra,
        lambda: leadership.current() is not None,
        cache.dra.nodes,
        scheduler_name=scheduler_name,
        report=report,
    )
