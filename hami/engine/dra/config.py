"""Which device families go to DRA, and through which DeviceClass (hami serve's --dra-mode and
--dra-device-classes, the chart's `dra` values)."""

from collections.abc import Iterable
from dataclasses import dataclass

from hami.engine.families.hygon import DRA_DRIVER as DCU_DRIVER
from hami.engine.families.hygon import TYPE as DCU
from hami.engine.model import PodRequest
from hami.engine.nvidianames import HAMI_DRA_DRIVER, NVIDIA

MODES = ("off", "all", "annotated")


class DraConfigError(ValueError):
    """A DRA setting that cannot be used; the message names the setting and the fix."""


@dataclass(frozen=True, slots=True)
class DraClass:
    """A family's DeviceClass, and the driver whose attributes (`uuid`, `productName`) the
    selectors read (the attribute domain; HAMi-DRA's classes are named after their drivers)."""

    family: str  # FamilyWire.type: NVIDIA, DCU, ...
    device_class: str
    driver: str


# HAMi-DRA's classes: NVIDIA's cards and Hygon's DCUs, served together.
DEFAULT_CLASSES = (
    DraClass(NVIDIA, HAMI_DRA_DRIVER, HAMI_DRA_DRIVER),
    DraClass(DCU, DCU_DRIVER, DCU_DRIVER),
)
DEFAULT_CLASSES_TEXT = ",".join(f"{c.family}={c.device_class}" for c in DEFAULT_CLASSES)


@dataclass(frozen=True, slots=True)
class DraConfig:
    mode: str = "off"  # off | all | annotated (only pods annotated hami.io/device-world=dra)
    classes: tuple[DraClass, ...] = DEFAULT_CLASSES

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise DraConfigError(f"--dra-mode {self.mode!r}: valid are {', '.join(MODES)}")

    @property
    def on(self) -> bool:
        return self.mode != "off"

    def for_family(self, family: str) -> DraClass | None:
        return next((c for c in self.classes if c.family == family), None)


DRA_OFF = DraConfig()


def parse_classes(text: str, known: frozenset[str]) -> tuple[DraClass, ...]:
    """`FAMILY=CLASS[@DRIVER],...` (the driver defaults to the class's name); `known` are the
    family types this process schedules."""
    out: list[DraClass] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        family, sep, rest = part.partition("=")
        device_class, _, driver = rest.partition("@")
        family, device_class, driver = family.strip(), device_class.strip(), driver.strip()
        if not sep or not family or not device_class:
            raise DraConfigError(
                f"--dra-device-classes: {part!r} must be FAMILY=DEVICECLASS[@DRIVER], "
                "e.g. NVIDIA=hami-core-gpu.project-hami.io"
            )
        if family not in known:
            raise DraConfigError(
                f"--dra-device-classes: no device family {family!r}; "
                f"known: {', '.join(sorted(known))}"
            )
        if any(c.family == family for c in out):
            raise DraConfigError(f"--dra-device-classes names family {family} twice")
        out.append(DraClass(family, device_class, driver or device_class))
    return tuple(out)


def unpublished(classes: Iterable[DraClass], request: PodRequest) -> str:
    """Why a DRA pod has no node to go to when no DRA driver publishes a card on any node: the
    DeviceClass and driver of each family it asks, and what to install (docs/dra.md)."""
    asked = {NVIDIA} if request.wants_nvidia else set()
    asked |= {f.type for container in request.families for f in container}
    sources = [
        f"its {c.family} devices from DeviceClass {c.device_class} of driver {c.driver}"
        for c in classes
        if c.family in asked
    ]
    return (
        "0/0 nodes are available: no DRA driver publishes a device on any node (no "
        f"ResourceSlice names one); the pod takes {', '.join(sources) or 'no DeviceClass'}: "
        'install that DRA driver on the nodes that should run it (docs/dra.md, "What to '
        'install"), or recreate the pod annotated hami.io/device-world: device-plugin to '
        "leave it to HAMi's device plugin."
    )
