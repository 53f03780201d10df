"""A simulated DRA driver for e2e tests: HAMi-DRA's driver, minus the GPUs and the kubelet plugin.

What the real components would do, and what this stand-in does in their place:

* **Publishing** (HAMi-DRA's driver on each node, built on NVIDIA's kubelet plugin): one
  ResourceSlice per node under driver `hami-core-gpu.project-hami.io`, pool = the node, with a
  device per card the test names: attributes `type: hami-gpu`, `uuid`, `productName`, `index`;
  consumable capacity `memory` (bytes) and `cores` (percent), `allowMultipleAllocations`. The
  values come from the node's :class:`~tests.e2e.nodespec.NodeSpec` (the node simulator's own
  made-up cards), so a card the simulator registers for HAMi's device plugin is published under
  the same UUID where the test wants both worlds. The DeviceClass is HAMi-DRA's chart's.
  Published as Hygon's (``family="DCU"``), the cards are DCUs as Hygon's driver
  (HYGON-AI/k8s-hcu-dra-driver) publishes them, in a slice of their own under driver
  ``dra.hygon.com`` (tests/draobjects.py's ``dcu_device``): named ``hcu-<pci address>`` with no
  number, `cores` the card's compute units (a K100_AI's 120), `slices` 4; under a DeviceClass
  selecting that driver. The PCI address is made up from the card's index (card i on bus
  0x10·(i+1)), and the devices are listed from the highest address down: the real driver lists
  them in Go map order, so their order in the slice tells nothing. The node's memory is then a
  DCU's stand-in value.
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

from hami.engine.families.hygon import DRA_DRIVER as DCU_DRIVER
from hami.engine.families.hygon import TYPE as DCU
from hami.engine.nvidianames import HAMI_DRA_DRIVER, NVIDIA
from tests.draobjects import dcu_device, device_class, gpu_device, resource_slice

from .draworld import device_class as driver_class
from .kube import Kube
from .nodespec import CardSpec, NodeSpec

PRODUCT = "Tesla T4"  # what NVIDIA's plugin reads from NVML for a T4 (no vendor prefix)


def _gpu(c: CardSpec) -> dict[str, object]:
    return gpu_device(f"gpu-{c.index}", c.uuid, memory_mib=c.devmem, product=PRODUCT, index=c.index)


def _dcu(c: CardSpec) -> dict[str, object]:
    return dcu_device(f"0000:{0x10 * (c.index + 1):02x}:00.0", c.uuid, memory_mib=c.devmem)


def dcu_name(index: int) -> str:
    """The device name of card `index` as published by :func:`_dcu`."""
    return f"hcu-0000-{0x10 * (index + 1):02x}-00-0"


# Each family the driver plays: its driver, its DeviceClass, its slices' name suffix, and a
# card as its slice has it.
FAMILIES = {
    NVIDIA: (HAMI_DRA_DRIVER, device_class(), "gpus", _gpu),
    DCU: (DCU_DRIVER, driver_class(DCU_DRIVER), "dcus", _dcu),
}


class SimulatedDraDriver:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.published: list[str] = []
        self.classes: list[str] = []
        self._install(NVIDIA)

    def _install(self, family: str) -> None:
        cls = FAMILIES[family][1]
        if cls["metadata"]["name"] not in self.classes:
            self.kube.apply(json.dumps(cls))
            self.classes.append(cls["metadata"]["name"])

    def publish(
        self, node: NodeSpec, cards: Sequence[int] | None = None, *, family: str = NVIDIA
    ) -> str:
        """Publish the node's cards (those of `cards`, by index; all by default) as `family`'s
        driver does; the slice's name."""
        driver, _, suffix, device = FAMILIES[family]
        self._install(family)
        chosen = [c for c in node.cards if cards is None or c.index in cards]
        if family == DCU:
            chosen.reverse()  # listed in no order of theirs (above)
        name = f"{node.name}-{suffix}"
        obj = resource_slice(node.name, [device(c) for c in chosen], driver=driver, name=name)
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
        for name in self.classes:
            self.kube("delete", "deviceclass", name, "--ignore-not-found")
