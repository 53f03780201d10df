"""The composition root: a run's choices, made once from its settings or flags, and the parts
built from them.

Every `hami` command that decides starts here: `hami serve` from its Settings, `hami simulate`,
`hami explain` and `hami status` from the same device flags as serve's (of_flags), `hami bench`
as serve runs with no flags (serve_defaults). A run's choices are the device families
(the device config and the --enable-* flags), the default card and node policies, NVIDIA's
resource names and defaults and GFD splitting; the cache, its quota book, the node locks, the
placement and the admission rules are built from them here and nowhere else. Each of those
parts takes every choice as a required argument, so a part built elsewhere with one left out
is a TypeError, never (silently) every family HAMi knows.
"""

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace

from hami.cache.quota import Loosened, QuotaBook
from hami.cache.records import Distrust, EditIgnored
from hami.cache.store import ClusterCache, Released
from hami.engine.admission import AdmissionConfig
from hami.engine.dra.config import DraClass, DraConfig, DraConfigError, parse_classes
from hami.engine.families.nvidia.family import NvidiaFamily
from hami.engine.families.registry import GATED, Families
from hami.engine.policy import Defaults
from hami.engine.requests import ResourceDefaults
from hami.runtime.config import (
    ConfigError,
    Settings,
    device_classes,
    device_config,
    gpu_core_policy,
    injection_config,
    resource_defaults,
    validate_dra_split,
)
from hami.service.nodelock.table import NodeLocks
from hami.service.nodelock.wire import lock_keys
from hami.service.placement import Placement
from hami.service.preemption.preempter import Preempter, PreemptingPlacement


@dataclass(frozen=True)
class Choices:
    """What one run decides once, and every part built from it."""

    families: Families
    policies: Defaults
    resources: ResourceDefaults
    gfd_split: int
    # Tasks per card a DRA driver publishes (--dra-split-count).
    dra_split: int
    # Each family's DeviceClass and driver in DRA mode (--dra-device-classes).
    dra_classes: tuple[DraClass, ...]
    # NVIDIA's core policy: the device config's where it names one, else --gpu-core-policy.
    gpu_core_policy: str
    # What the device config says that changes nothing: each run says it once, its own way.
    notes: tuple[str, ...]

    def with_policies(self, policies: Defaults) -> "Choices":
        """These choices with other default policies (a scenario's, for its replay)."""
        return replace(self, policies=policies)

    def dra(self, mode: str) -> DraConfig:
        """The webhook's DRA mode `mode` (serve's --dra-mode, a scenario's draMode) over this
        run's classes. Raises DraConfigError for a mode it does not know."""
        return DraConfig(mode, self.dra_classes)

    def locks(self) -> NodeLocks:
        """The node lock table, watching HAMi's lock and each configured family's own."""
        return NodeLocks(keys=lock_keys(self.families))

    def cache(
        self,
        clock: Callable[[], float],
        *,
        locks: NodeLocks,
        reservation_ttl: float,
        on_distrust: Distrust | None = None,
        on_edit_ignored: EditIgnored | None = None,
        on_release: Released | None = None,
        on_loosened: Loosened | None = None,
    ) -> ClusterCache:
        """The cluster's state as this run reads it; the hooks are serve's (what it tells)."""
        quotas = QuotaBook(
            names=self.resources.names,
            memory_factor=self.resources.memory_factor,
            on_loosened=on_loosened,
            families=self.families,
        )
        return ClusterCache(
            clock,
            reservation_ttl,
            resources=self.resources,
            on_distrust=on_distrust,
            on_edit_ignored=on_edit_ignored,
            on_release=on_release,
            quotas=quotas,
            gfd_split=self.gfd_split,
            dra_split=self.dra_split,
            locks=locks,
            families=self.families,
        )

    def placement(self, cache: ClusterCache, preempter: Preempter | None = None) -> Placement:
        """The filter over `cache`; with `preempter`, one that frees cards for a pod that fits
        nowhere (serve's --preemption)."""
        if preempter is not None:
            return PreemptingPlacement(preempter, cache, self.policies, self.resources)
        return Placement(cache, self.policies, self.resources)

    def admission(self) -> AdmissionConfig:
        """A replay's admission rules (`hami simulate`): the webhook's with this run's
        families, resources, policies and core policy, and nothing of serve's own flags."""
        return AdmissionConfig(
            resources=self.resources,
            policies=self.policies,
            gpu_core_policy=self.gpu_core_policy,
            families=self.families,
        )

    def serve_admission(self, s: Settings) -> AdmissionConfig:
        """`hami serve`'s admission rules: the run's choices and serve's own flags."""
        return AdmissionConfig(
            scheduler_name=s.scheduler_name,
            force_overwrite_default_scheduler=s.force_overwrite_default_scheduler,
            overwrite_env=s.overwrite_env,
            gpu_core_policy=self.gpu_core_policy,
            resources=self.resources,
            policies=self.policies,
            injection=injection_config(s),
            families=self.families,
            gpu_device_classes=device_classes(s, self.families),
        )


def of_settings(s: Settings, *, nvidia_flags: bool = True) -> Choices:
    """`hami serve`'s choices. Without `nvidia_flags` (a command, which has no flags for
    NVIDIA's defaults) a device config's NVIDIA defaults are not held to the settings'. Raises
    ConfigError for a device config that cannot be used."""
    devices = device_config(s, nvidia_flags=nvidia_flags)
    resources, core_policy = resource_defaults(s), gpu_core_policy(s, devices)
    # NVIDIA's member reads the run's resource names and core policy: admission claims
    # NVIDIA's containers through it as every family's.
    families = devices.families.replacing(NvidiaFamily(resources, core_policy))
    try:
        dra_classes = parse_classes(s.dra_device_classes, frozenset(families.by_type()))
    except DraConfigError as e:
        raise ConfigError(str(e)) from None
    return Choices(
        families=families,
        policies=Defaults(s.gpu_scheduler_policy, s.node_scheduler_policy),
        resources=resources,
        gfd_split=s.gfd_split_count,
        dra_split=s.dra_split_count,
        dra_classes=dra_classes,
        gpu_core_policy=core_policy,
        notes=devices.notes,
    )


def serve_defaults() -> Choices:
    """`hami serve`'s choices without flags (the chart's families): what `hami bench`
    measures."""
    return of_settings(Settings())


# The settings of serve's that the commands reading a cluster or a scenario as serve does take
# as flags of the same names (hami.runtime.deviceconfig.add_device_arguments; explain's and
# status's --gfd-split-count; explain's policies); a command without one takes serve's default.
_COMMAND_SETTINGS = (
    "device_config_file",
    *(f"enable_{name}" for name in GATED),
    "ascend_runtime_class_name",
    "ascend_hami_vnpu_core",
    "gfd_split_count",
    "dra_device_classes",
    "dra_split_count",
    "gpu_scheduler_policy",
    "node_scheduler_policy",
)


def of_flags(args: argparse.Namespace, command: str) -> Choices:
    """The choices of `hami <command>` (simulate, explain, status), from the flags it shares
    with serve, read as serve reads them: the families, the Ascend chips and the GFD split are
    the ones serve given those flags schedules. What the device config says that changes
    nothing is told on stderr. Raises ConfigError."""
    given = vars(args)
    s = Settings(**{name: given[name] for name in _COMMAND_SETTINGS if name in given})
    validate_dra_split(s)
    choices = of_settings(s, nvidia_flags=False)
    for note in choices.notes:
        print(f"hami {command}: warning: {note}", file=sys.stderr)
    return choices
