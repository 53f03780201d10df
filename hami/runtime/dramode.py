"""--dra-mode and --dra-device-classes: the admission service's DraConfig, and the leader's
placer of the pods it gates (docs/dra.md)."""

from collections.abc import Callable

from hami.engine.dra.config import DraConfig, DraConfigError
from hami.kube.api import KubeAPI
from hami.kube.leader import Leadership
from hami.runtime.choices import Choices
from hami.runtime.config import ConfigError, Settings
from hami.service.draplacer import DraPlacer
from hami.service.placement import FilterOutcome, Placement


def dra_config(s: Settings, choices: Choices) -> DraConfig:
    """The DRA mode the webhook runs in, over the run's classes (Choices.dra_classes); a
    setting it cannot use stops the process."""
    try:
        config = choices.dra(s.dra_mode)
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
