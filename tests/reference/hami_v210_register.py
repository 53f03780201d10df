"""Which nodes HAMi v2.10's scheduler registers for NVIDIA, for the reference model: a test double.

Written from HAMi v2.10.0's pkg/scheduler/scheduler.go (register: a node is dropped when
CheckHealth says unhealthy or the annotation lists no card, and its cards are (re)read only
when CheckHealth says they need an update), pkg/device/nvidia/device.go
(NvidiaGPUDevices.CheckHealth: the allocatable count against the one last reported) and
pkg/device/devices.go (device.CheckHealth: the `hami.io/node-handshake` annotation). A
handshake without `Requesting` (none, `Deleted_<time>` as schedulers up to v2.7 wrote on
clean-up, `Reported <time>` as device plugins up to v2.7 wrote) is rewritten to
`Requesting_<now>` and counts as healthy and changed. Shares no code with hami.engine.

Where hami-py differs on purpose the model takes the switch named after the entry of
hami_v210.DELIBERATE_DIFFERENCES and the model sets it as hami-py does.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

DATE_TIME = "%Y-%m-%d %H:%M:%S"  # Go's time.DateTime
# hami-py's side of "no-allocatable" (hami_v210.DELIBERATE_DIFFERENCES).
NO_ALLOCATABLE = True


def handshake_health(handshake: str, allocatable: int, now: datetime) -> tuple[bool, bool, str]:
    """device.CheckHealth: (healthy, changed, the handshake written, "" when none)."""
    if "Requesting" in handshake:
        _, found, stamp = handshake.partition("_")
        if not found:
            return True, False, ""
        try:
            former = datetime.strptime(stamp, DATE_TIME)
        except ValueError:
            return True, False, ""
        if now < former + timedelta(seconds=60):
            return True, False, ""
        return allocatable > 0, False, ""
    return True, True, "Requesting_" + now.strftime(DATE_TIME)


@dataclass
class Registry:
    """The scheduler's view across register passes: ReportedGPUNum and the node cache."""

    reported: dict[str, int] = field(default_factory=dict)
    cached: set[str] = field(default_factory=set)

    def check_health(
        self, name: str, handshake: str, allocatable: int, now: datetime
    ) -> tuple[bool, bool, str]:
        """NvidiaGPUDevices.CheckHealth (the register annotation is unchanged here)."""
        healthy, changed, written = handshake_health(handshake, allocatable, now)
        reported = self.reported.get(name, 0)
        if allocatable == 0:
            if reported == 0:
                return healthy, changed, written
            self.reported[name] = 0
            return False, changed, written
        if reported != allocatable:
            self.reported[name] = allocatable
            return True, True, written
        return healthy, changed, written

    def register(
        self, name: str, handshake: str | None, allocatable: int, cards: int, now: datetime
    ) -> str | None:
        """One register pass over one node with at least one card; the node's handshake after
        it (None: no such annotation)."""
        healthy, update, written = self.check_health(name, handshake or "", allocatable, now)
        after = written or handshake
        if not healthy:
            if name in self.cached:
                self.cached.discard(name)
                return None  # NodeCleanUp: v2.10 removes the key
            return after
        if cards == 0:
            self.cached.discard(name)
        elif update:
            self.cached.add(name)
        return after

    def registered(self, name: str, allocatable: int) -> bool:
        """Whether a pod may be placed on the node ("no-allocatable": as hami-py, not with
        nothing allocatable)."""
        return name in self.cached and not (NO_ALLOCATABLE and allocatable == 0)
