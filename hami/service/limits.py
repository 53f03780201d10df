"""Standalone mode's bind step: write the per-pod ConfigMap that carries each container's limits.

The pod's containers require its keys (not optional), so a pod whose bind
failed before this point can never start without its limits.
"""

from typing import Any

from hami.engine.families.registry import Families
from hami.engine.injection import CONFIG_ANNOTATION, config_data
from hami.engine.inventory import split_devices
from hami.engine.model import PodDevices
from hami.kube.api import KubeAPI
from hami.kube.errors import Conflict
from hami.service.binderrors import BindError


class LimitsWriter:
    def __init__(self, kube: KubeAPI, families: Families) -> None:
        self.kube = kube
        self._families = families  # to tell NVIDIA's cards from the other families'

    async def __call__(self, namespace: str, name: str, uid: str, devices: PodDevices) -> None:
        pod = await self.kube.get_pod(namespace, name)
        if pod is None:
            raise BindError(f"pod {namespace}/{name} disappeared before its limits were written")
        config = ((pod.get("metadata") or {}).get("annotations") or {}).get(CONFIG_ANNOTATION)
        if not config:
            return  # admitted before standalone mode was switched on: the device plugin sets limits
        spec = pod.get("spec") or {}
        names = [
            c["name"] for c in [*(spec.get("initContainers") or ()), *spec.get("containers", ())]
        ]
        owner = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": name,
            "uid": uid or pod["metadata"]["uid"],
        }
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": config,
                "namespace": namespace,
                "ownerReferences": [owner],
                "labels": {"app.kubernetes.io/managed-by": "hami-scheduler"},
            },
            # hami-core's limits: NVIDIA's cards only, whatever else the pod holds.
            "data": config_data(names, split_devices(devices, self._families)[0]),
        }
        try:
            await self.kube.create_configmap(namespace, body)
        except Conflict:
            existing = await self.kube.get_configmap(namespace, config)
            owners = (existing or {}).get("metadata", {}).get("ownerReferences") or []
            if existing is None or not any(o.get("uid") == owner["uid"] for o in owners):
                raise BindError(
                    f"ConfigMap {namespace}/{config} named by the pod's {CONFIG_ANNOTATION} annotation "
                    "belongs to another object; refusing to overwrite it"
                ) from None
            body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            await self.kube.replace_configmap(namespace, config, body)
