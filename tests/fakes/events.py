"""An EventRecorder that keeps the events it is given instead of posting them."""

from collections.abc import Mapping

from hami.kube.events import EventRecorder, EventType
from tests.fakes.kubeapi import FakeKube


class RecordedEvents(EventRecorder):
    """The events a reporter records, kept instead of posted."""

    def __init__(self) -> None:
        super().__init__(FakeKube())
        self.seen: list[tuple[str, str, str]] = []

    def record(
        self, obj_ref: Mapping[str, str], type_: EventType, reason: str, message: str
    ) -> None:
        self.seen.append((type_, reason, message))
