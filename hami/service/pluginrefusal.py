"""Telling the administrator when the chart's admission policy refuses the device plugin's writes.

HAMi's device plugin reports each Allocate on the pod (`hami.io/bind-phase`, the consumed
`hami.io/vgpu-devices-to-allocate`) and releases the node lock. Running under a name the
policy does not list (`admissionPolicy.devicePluginUsers`), every one of those writes is
refused: each Allocate fails with the policy's message, the kubelet rejects the pod
(`UnexpectedAdmissionError`, the message quoted in its status) and every GPU pod of the node
fails that way. The pod's status is all the scheduler sees of it, so that is where the
plugin's identity is read from: every replica logs it once per node and identity, and the
leader posts a Warning Event on each such pod naming the value to add.
"""

import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from hami.engine import names
from hami.kube.events import EventReason, EventRecorder

log = logging.getLogger(__name__)

REASON = EventReason.DEVICE_PLUGIN_REFUSED
# The chart's policy message (helm/hami/templates/admission-policy.yaml), as the plugin's
# failed Allocate carries it into the pod's status.
_REFUSED = re.compile(
    r"only the GPU scheduler and its device plugin write; (?P<user>\S+) may not set, change or "
    r"remove it"
)


def refused_writer(pod: Mapping[str, Any]) -> str | None:
    """The identity whose write the policy refused, for a pod of ours the kubelet rejected
    because of it; None for any other pod."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    status = pod.get("status") or {}
    if not annotations.get(names.ASSIGNED_NODE) or status.get("phase") != "Failed":
        return None
    found = _REFUSED.search(str(status.get("message") or ""))
    return found.group("user") if found else None


def advice(node: str, user: str) -> str:
    return (
        f"the admission policy refused a write of HAMi's device plugin on node {node}, which "
        f"runs as {user}: add {user} to the chart's admissionPolicy.devicePluginUsers (or run "
        "the plugin as a listed user); until then every GPU pod on the node fails at the kubelet"
    )


class PluginRefusals:
    def __init__(
        self, events: EventRecorder, leading: Callable[[], bool], *, limit: int = 10_000
    ) -> None:
        self.events = events
        self.leading = leading
        self.limit = limit
        self._logged: set[tuple[str, str]] = set()  # (node, identity)
        self._told: OrderedDict[str, None] = OrderedDict()  # uids of pods given the Event

    def seen(self, pod: Mapping[str, Any]) -> None:
        user = refused_writer(pod)
        if user is None:
            return
        meta = pod.get("metadata") or {}
        node = str((meta.get("annotations") or {}).get(names.ASSIGNED_NODE))
        text = advice(node, user)
        if (node, user) not in self._logged and len(self._logged) < self.limit:
            self._logged.add((node, user))
            log.error("device plugin's writes refused", extra={"node": node, "reason": text})
        uid = str(meta.get("uid", ""))
        if uid in self._told or not self.leading():
            return
        self._told[uid] = None
        while len(self._told) > self.limit:
            self._told.popitem(last=False)
        ref = {"namespace": meta.get("namespace", ""), "name": meta.get("name", ""), "uid": uid}
        self.events.record(ref, "Warning", REASON, text)
