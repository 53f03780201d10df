"""Test double for HAMi's NVIDIA device plugin on the node tier's real kubelet, minus the GPUs.

Run (the node tier starts it; ``--proto`` is the kubelet's device-plugin API compiled by
:func:`compile_api`)::

    python -m tests.e2e.fake_device_plugin --kubeconfig K --spec nodes.json \
        --plugin-dir <kubelet root>/device-plugins --proto <folder> --host-files <folder>

It speaks the kubelet's device-plugin gRPC API v1beta1: registers ``nvidia.com/gpu`` with the
kubelet, lists one fake device per share of each card (ListAndWatch), and answers Allocate the
way HAMi's plugin does: it ignores the device IDs the kubelet picked, finds the pod holding the
node lock, takes that pod's next container from ``hami.io/vgpu-devices-to-allocate``, answers
with HAMi's environment (``NVIDIA_VISIBLE_DEVICES``, ``CUDA_DEVICE_MEMORY_LIMIT_<i>``,
``CUDA_DEVICE_SM_LIMIT``) and mounts (``libvgpu.so``, ``/etc/ld.so.preload``, both empty files
here), and once the pod has no device left sets ``hami.io/bind-phase=success`` and releases the
lock. It also writes the node's ``hami.io/node-nvidia-register`` annotation. It never picks a
card: the scheduler did.

For a ``plugin="gke"`` spec it stands in for GKE's own plugin instead (Lab 12's node): no
annotation, ``split`` devices per card as GKE's GPU time-sharing lists them, and an Allocate
that hands out nothing, since what GKE's plugin gives (the card's device nodes) needs a GPU.

In a pod (the labs' replays, tests/e2e/test_node_labs.py), the node tier's stand-in image for
HAMi's ``projecthami/hami:v2.10.0`` (tests/e2e/images/standin/) runs it as HAMi's
``nvidia-device-plugin`` with HAMi's flags, in the chart's DaemonSet::

    python -m tests.e2e.fake_device_plugin --in-pod hami --config-file=/device-config.yaml ...
    python -m tests.e2e.fake_device_plugin --in-pod gke     # GKE's plugin, a DaemonSet too

There it finds its cards where HAMi's plugin asks NVML, in the driver folder (``GPUS`` under
``/driver-root``, written by the node tier), its node in ``NODE_NAME``, its split count in
HAMi's ``--config-file`` (``deviceSplitCount``; GKE: ``SHARED_CLIENTS``), the API server
through its ServiceAccount, and mounts at Allocate what HAMi's ``vgpu-init.sh`` put in
``$HOOK_PATH/vgpu`` on the host.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import platform
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client, config

from hami.runtime.logs import KlogFormatter

from .nodesim import BIND_PHASE, MERGE_PATCH, NODE_LOCK, TO_ALLOCATE, VENDOR, Simulator
from .nodespec import (
    GPU_RESOURCE,
    PLUGINS,
    REGISTER_ANNOTATION,
    NodeSpec,
    load_specs,
    register_annotation,
)

log = logging.getLogger("fake-device-plugin")
READY_MARKER = "fake device plugin registered"
SOCKET = "hami-fake-nvidia.sock"
VGPU_DIR = "/usr/local/vgpu"
GPUS = "hami-e2e-gpus.json"  # in the driver folder: the node's cards, as dump_specs writes them
IN_POD_DRIVER_ROOT = Path("/driver-root")  # where the chart (and GKE's DaemonSet) mount it
IN_POD_PROTO = Path("/opt/standin/proto")  # the compiled API, in the stand-in image
KUBELET_PLUGINS = Path("/var/lib/kubelet/device-plugins")


def compile_api(k8sbins: Path, out: Path) -> Path:
    """Compile the v1beta1 API from the kubelet module the node tier's kubelet is built from."""
    module = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubelet"],
        cwd=k8sbins,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"},
    ).stdout.strip()
    proto = Path(module) / "pkg" / "apis" / "deviceplugin" / "v1beta1"
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{proto}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            str(proto / "api.proto"),
        ],
        check=True,
        timeout=120,
    )
    return out


class Plugin:
    def __init__(self, core: client.CoreV1Api, sim: Simulator, node: NodeSpec, files: Path):
        self.core, self.sim, self.node, self.files = core, sim, node, files
        self.api: Any = importlib.import_module("api_pb2")
        self.allocations = 0

    # --- DevicePlugin service --------------------------------------------------------------

    async def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:  # noqa: N802 (the API's name)
        return self.api.DevicePluginOptions()

    async def ListAndWatch(self, request: Any, context: Any) -> Any:  # noqa: N802 (the API's name)
        gke = self.node.plugin == "gke"
        devices = [
            self.api.Device(
                ID=f"nvidia{card.index}/vgpu{share}" if gke else f"{card.uuid}::{share}",
                health="Healthy",
            )
            for card in self.node.cards
            for share in range(self.node.per_card)
        ]
        yield self.api.ListAndWatchResponse(devices=devices)
        await asyncio.Event().wait()  # the list never changes; keep the stream open

    async def GetPreferredAllocation(self, request: Any, context: Any) -> Any:  # noqa: N802 (the API's name)
        return self.api.PreferredAllocationResponse()

    async def PreStartContainer(self, request: Any, context: Any) -> Any:  # noqa: N802 (the API's name)
        return self.api.PreStartContainerResponse()

    async def Allocate(self, request: Any, context: Any) -> Any:  # noqa: N802 (the API's name)
        responses = []
        for container in request.container_requests:
            if self.node.plugin == "gke":
                log.info("allocate %s (GKE: no handshake)", ",".join(container.devices_ids))
                responses.append(self.api.ContainerAllocateResponse())
            else:
                responses.append(await self._allocate_one(len(container.devices_ids)))
        return self.api.AllocateResponse(container_responses=responses)

    # --- HAMi's handshake ------------------------------------------------------------------

    async def _allocate_one(self, wanted: int) -> Any:
        pod = await self.sim._pending_pod(self.node.name)
        if pod is None:
            raise RuntimeError(f"no pod holds the node lock of {self.node.name}")
        annotations = pod["metadata"].get("annotations", {})
        segments = annotations.get(TO_ALLOCATE, "").split(";")
        index = next((i for i, s in enumerate(segments) if VENDOR in s), None)
        if index is None:
            await self._fail(pod)
            raise RuntimeError(f"no devices left to allocate in {annotations}")
        devices = [p.split(",") for p in segments[index].split(":") if VENDOR in p]
        if len(devices) != wanted:
            await self._fail(pod)
            raise RuntimeError(f"device number not matched: {len(devices)} != {wanted}")
        segments[index] = ""
        await self.sim._patch_annotations(pod, {TO_ALLOCATE: ";".join(segments)})
        if not any(VENDOR in s for s in segments):
            await self.sim._patch_annotations(pod, {BIND_PHASE: "success"})
            await self.sim._release_lock(self.node.name, pod)
        self.allocations += 1
        name = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        log.info("allocate %s: %s", name, ",".join(d[0] for d in devices))
        envs = {
            "NVIDIA_VISIBLE_DEVICES": ",".join(d[0] for d in devices),
            "CUDA_DEVICE_SM_LIMIT": devices[0][3],
            **{f"CUDA_DEVICE_MEMORY_LIMIT_{i}": f"{d[2]}m" for i, d in enumerate(devices)},
        }
        mounts = [
            self.api.Mount(
                container_path=f"{VGPU_DIR}/libvgpu.so",
                host_path=str(self.files / "libvgpu.so"),
                read_only=True,
            ),
            self.api.Mount(
                container_path="/etc/ld.so.preload",
                host_path=str(self.files / "ld.so.preload"),
                read_only=True,
            ),
        ]
        return self.api.ContainerAllocateResponse(envs=envs, mounts=mounts)

    async def _fail(self, pod: Any) -> None:
        await self.sim._patch_annotations(pod, {BIND_PHASE: "failed"})
        await self.sim._release_lock(self.node.name, pod)


async def _serve(
    node: NodeSpec,
    plugin_dir: Path,
    proto: Path,
    host_files: Path,
    kubeconfig: Path | None,
    socket_name: str = SOCKET,
) -> None:
    """Register with the node's kubelet as ``node.plugin``'s plugin and serve until killed;
    ``kubeconfig`` None: the pod's ServiceAccount."""
    import grpc  # type: ignore[import-untyped]

    sys.path.insert(0, str(proto))
    api: Any = importlib.import_module("api_pb2")
    services: Any = importlib.import_module("api_pb2_grpc")
    if kubeconfig is None:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    else:
        await config.load_kube_config(str(kubeconfig))
    async with client.ApiClient() as api_client:
        core = client.CoreV1Api(api_client)
        sim = Simulator(api_client, [node])
        if node.plugin == "hami":
            for card in node.cards:
                # HAMi's plugin's line for each card it registers (printf-style: klog's Infof).
                log.info(
                    "Registered device id=%d, memory=%dMB, type=%s, numa=%d, health=%s",
                    *(card.index, card.devmem, card.type, card.numa, str(card.health).lower()),
                )
            await sim._call(
                core.patch_node,
                node.name,
                {"metadata": {"annotations": {REGISTER_ANNOTATION: register_annotation(node)}}},
                _content_type=MERGE_PATCH,
            )
        plugin = Plugin(core, sim, node, host_files)
        server = grpc.aio.server()
        services.add_DevicePluginServicer_to_server(plugin, server)
        socket = plugin_dir / socket_name
        socket.unlink(missing_ok=True)
        server.add_insecure_port(f"unix://{socket}")
        await server.start()
        async with grpc.aio.insecure_channel(f"unix://{plugin_dir / 'kubelet.sock'}") as ch:
            await services.RegistrationStub(ch).Register(
                api.RegisterRequest(
                    version="v1beta1",
                    endpoint=socket_name,
                    resource_name=GPU_RESOURCE,
                    options=api.DevicePluginOptions(),
                )
            )
        log.info(
            "%s: %s on %s (lock annotation %s)", READY_MARKER, GPU_RESOURCE, node.name, NODE_LOCK
        )
        await server.wait_for_termination()


def in_pod_node(plugin: str, driver_root: Path, config_file: Path | None) -> NodeSpec:
    """The node as the stand-in finds it in a pod: cards from the driver folder, the node's name
    from NODE_NAME, the split count from HAMi's device config (GKE: SHARED_CLIENTS)."""
    (described,) = load_specs((driver_root / GPUS).read_text())
    if plugin == "hami":
        device_config = yaml.safe_load(config_file.read_text()) if config_file else {}
        split = int((device_config.get("nvidia") or {}).get("deviceSplitCount", 10))
    else:
        split = int(os.environ.get("SHARED_CLIENTS", "1"))
    return replace(described, name=os.environ["NODE_NAME"], plugin=plugin, split=split, labels={})


def _in_pod(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="nvidia-device-plugin (stand-in)")
    parser.add_argument("--in-pod", choices=PLUGINS, required=True)
    parser.add_argument("--config-file", type=Path)
    # HAMi's other flags (--mig-strategy, --disable-core-limit, ...) change nothing here.
    args, _ = parser.parse_known_args(argv)
    node = in_pod_node(args.in_pod, IN_POD_DRIVER_ROOT, args.config_file)
    # Host paths: what HAMi's vgpu-init.sh copied into $HOOK_PATH/vgpu, mounted at Allocate.
    host_files = Path(os.environ.get("HOOK_PATH", "/usr/local")) / "vgpu"
    # A socket of the pod's own: a pod being replaced, ending after the next one registered,
    # must not take the next one's socket with it.
    socket_name = f"hami-fake-nvidia-{platform.node()}.sock"
    asyncio.run(_serve(node, KUBELET_PLUGINS, IN_POD_PROTO, host_files, None, socket_name))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KlogFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    if any(a.split("=")[0] == "--in-pod" for a in argv):
        _in_pod(argv)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--plugin-dir", type=Path, required=True)
    parser.add_argument("--proto", type=Path, required=True)
    parser.add_argument("--host-files", type=Path, required=True)
    args = parser.parse_args(argv)
    (node,) = load_specs(args.spec.read_text())
    # On the host the files HAMi's vgpu-init.sh would copy are written here (empty library).
    args.host_files.mkdir(parents=True, exist_ok=True)
    (args.host_files / "libvgpu.so").write_bytes(b"")
    (args.host_files / "ld.so.preload").write_text(f"{VGPU_DIR}/libvgpu.so\n")
    asyncio.run(_serve(node, args.plugin_dir, args.proto, args.host_files, args.kubeconfig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
