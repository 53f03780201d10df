"""A simulated DRA driver for e2e tests: HAMi-DRA's driver, minus the GPUs and the kubelet plugin.

What the real components would do, and what this stand-in does in their place:

* **Publishing** (HAMi-DRA's driver on each node, built on NVIDIA's kubelet plugin): one
  ResourceSlice per node under driver `hami-core-gpu.project-hami.io`, pool = the node, with a
  device per card the test names: attributes `type: hami-gpu`, `uuid`, `productName`, `index`;
  consumable capacity `memory` (bytes) and `cores` (percent), `allowMultipleAllocations`. The
  values come from the node's :class:`~tests.e2e.nodespec.NodeSpec` (the node simulator's own
  made-up cards), so a card the simulator registers for HAMi's device plugin is published under
  the same UUID where the test wants both worlds. The DeviceClass is HAMi-DRA's chart's.
* **The kubelet side**: nothing to write. The node simulator already reports a pod Running; the
  kubelet plugin's NodePrepareResources writes nothing a scheduler reads.
* **The resource claim controller** (kube-controller-manager, absent here): :meth:`release`
  does what it does once a claim's last consumer is gone: takes the allocation back and lets
  the claim be deleted.

It never allocates: kube-scheduler's DynamicResources plugin chooses every device.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from tests.draobjects import device_class, gpu_device, resource_slice

from .kube import Kube
from .nodespec import NodeSpec

PRODUCT = "Tesla T4"  # what NVIDIA's plugin reads from NVML for a T4 (no vendor prefix)


class SimulatedDraDriver:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.published: list[str] = []
        self.kube.apply(json.dumps(device_class()))

    def publish(self, node: NodeSpec, cards: Sequence[int] | None = None) -> str:
        """Publish the node's cards (those of `cards`, by index; all by default); the slice's
        name."""
        chosen = [c for c in node.cards if cards is None or c.index in cards]
        devices = [
            gpu_device(
                f"gpu-{c.index}", c.uuid, memory_mib=c.devmem, product=PRODUCT, index=c.index
            )
            for c in chosen
        ]
        obj = resource_slice(node.name, devices)
        del obj["metadata"]["uid"]  # the API server's to give
        self.kube.apply(json.dumps(obj))
        self.published.append(obj["metadata"]["name"])
        return str(obj["metadata"]["name"])

    def release(self, namespace: str, claim: str) -> None:
        """The claim controller's part once no pod uses the claim: deallocate, then delete."""
        status = ["--subresource=status", "--type=merge", "-p", '{"status": null}']
        self.kube("patch", "resourceclaim", claim, "-n", namespace, *status)
        self.kube(
            "patch", "resourceclaim", claim, "-n", namespace,
            "--type=merge", "-p", '{"metadata": {"finalizers": null}}',
        )  # fmt: skip
        self.kube("delete", "resourceclaim", claim, "-n", namespace, "--ignore-not-found")

    def close(self) -> None:
        for name in self.published:
            self.kube("delete", "resourceslice", name, "--ignore-not-found")
        self.kube("delete", "deviceclass", device_class()["metadata"]["name"], "--ignore-not-found")
