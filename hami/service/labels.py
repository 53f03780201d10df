"""HAMi's `hami.io/vgpu-node` pod label, for API servers that drop a Binding's labels.

A bind sends the label inside the Binding, beside the allocation annotations,
but kube-apiserver copies a Binding's labels onto the pod only with the
PodTopologyLabelsAdmission feature (beta and on by default from 1.35). HAMi's
vGPU monitor lists the pods of its node by that label, so on older API
servers the leader adds it afterwards: one patch per pod that arrived without
it, at a bounded rate and behind every bind's writes (Priority.ROUTINE).
"""

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from hami.engine import names
from hami.kube.api import KubeAPI
from hami.kube.errors import KubeError

log = logging.getLogger(__name__)


def missing_label(pod: Mapping[str, Any]) -> str | None:
    """The node whose label the pod lacks: it is bound there with an allocation naming it."""
    metadata = pod.get("metadata") or {}
    node = (metadata.get("annotations") or {}).get(names.ASSIGNED_NODE)
    if not node or (pod.get("spec") or {}).get("nodeName") != node:
        return None
    if (metadata.get("labels") or {}).get(names.ASSIGNED_NODE) == node:
        return None
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return None
    return str(node)


class LabelMender:
    def __init__(
        self, kube: KubeAPI, leading: Callable[[], bool], *, rate: float = 50.0, limit: int = 10_000
    ) -> None:
        self.kube = kube
        self.leading = leading
        self.rate = rate
        self.limit = limit
        self._due: OrderedDict[tuple[str, str], str] = OrderedDict()  # (namespace, name) -> node
        self._wake = asyncio.Event()

    def seen(self, pod: Mapping[str, Any]) -> None:
        metadata = pod.get("metadata") or {}
        key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        node = missing_label(pod)
        if node is None:
            self._due.pop(key, None)
            return
        self._due[key] = node
        while len(self._due) > self.limit:
            self._due.popitem(last=False)
        self._wake.set()

    def gone(self, pod: Mapping[str, Any]) -> None:
        metadata = pod.get("metadata") or {}
        self._due.pop((str(metadata.get("namespace", "")), str(metadata.get("name", ""))), None)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            waiter = asyncio.ensure_future(self._wake.wait())
            stopper = asyncio.ensure_future(stop.wait())
            # A replica that was not leading when the pods came by picks them up once it leads.
            await asyncio.wait({waiter, stopper}, timeout=5, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            stopper.cancel()
            self._wake.clear()
            while self._due and not stop.is_set() and self.leading():
                (namespace, name), node = self._due.popitem(last=False)
                await self._mend(namespace, name, node)
                await asyncio.sleep(1 / self.rate)

    async def _mend(self, namespace: str, name: str, node: str) -> None:
        try:
            await self.kube.patch_pod_metadata(namespace, name, {}, {names.ASSIGNED_NODE: node})
        except KubeError as e:
            # Gone or busy: the pod's next event brings it back if it still lacks the label.
            log.info(
                "could not add the node label",
                extra={"namespace": namespace, "pod": name, "node": node, "error": str(e)},
            )
