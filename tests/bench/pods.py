"""What the load benches do with pods: create them through the API server a bounded number at a
time, follow when each was bound and started, and delete them afterwards without letting a
refused delete cost the figures of the run."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config, watch

CREATES_IN_FLIGHT = 32
WATCH_SECONDS = 300  # a watch is re-opened from its resourceVersion this often


def pod_manifest(name: str, gpu: bool, node_policy: str) -> dict[str, object]:
    resources = (
        {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}}
        if gpu
        else {"requests": {"cpu": "10m", "memory": "16Mi"}}
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "annotations": {"hami.io/node-scheduler-policy": node_policy} if gpu else {},
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "busybox", "resources": resources}],
        },
    }


def warn(what: str, error: BaseException) -> None:
    print(f"warning: {what}: {type(error).__name__}: {error}", file=sys.stderr, flush=True)


class Tracker:
    """The pods of some namespaces, `expected` of each: when each was created, bound, running.

    Each namespace is followed by a LIST, then a WATCH from its resourceVersion; a watch that is
    cut or refused (a loaded API server answers 504s and 410s) is listed again, so a run waits
    for what the pods did, not for a stream that died. A pod first seen bound on a re-list is
    counted bound when it was seen."""

    def __init__(self, core: client.CoreV1Api, expected: Mapping[str, int]) -> None:
        self.core = core
        self.expected = dict(expected)
        self.created: dict[str, dict[str, float]] = {ns: {} for ns in expected}
        self.bound: dict[str, dict[str, float]] = {ns: {} for ns in expected}
        self.running: dict[str, set[str]] = {ns: set() for ns in expected}
        self.create_errors = 0
        self._changed = asyncio.Event()

    @contextlib.asynccontextmanager
    async def following(self) -> AsyncIterator[Tracker]:
        tasks = [asyncio.create_task(self._follow(ns)) for ns in self.expected]
        try:
            await asyncio.sleep(0.5)  # the watches are open before the first create
            yield self
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _follow(self, namespace: str) -> None:
        while True:
            try:
                listed = await self.core.list_namespaced_pod(namespace, _request_timeout=120)
                for pod in listed.items:
                    self._see(namespace, pod)
                stream = watch.Watch().stream(
                    self.core.list_namespaced_pod,
                    namespace,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=WATCH_SECONDS,
                    _request_timeout=WATCH_SECONDS + 30,
                )
                async with stream:
                    async for event in stream:
                        self._see(namespace, event["object"])
            except asyncio.CancelledError:
                raise
            except Exception as e:  # any failure of the stream: list again
                warn(f"following the pods of {namespace}", e)
                await asyncio.sleep(1)

    def _see(self, namespace: str, pod: Any) -> None:
        name = pod.metadata.name
        if pod.spec.node_name and name not in self.bound[namespace]:
            self.bound[namespace][name] = time.monotonic()
            self._changed.set()
        if pod.status.phase == "Running" and name not in self.running[namespace]:
            self.running[namespace].add(name)
            self._changed.set()

    async def create(
        self, namespace: str, names: list[str], manifest: Callable[[str], dict[str, object]]
    ) -> None:
        """Create the pods, CREATES_IN_FLIGHT at a time; a refused create is counted, not fatal."""
        limit = asyncio.Semaphore(CREATES_IN_FLIGHT)

        async def one(name: str) -> None:
            async with limit:
                self.created[namespace][name] = time.monotonic()
                body: Any = manifest(name)
                try:
                    await self.core.create_namespaced_pod(
                        namespace, body, _preload_content=False, _request_timeout=120
                    )
                except (client.ApiException, aiohttp.ClientError, TimeoutError, OSError) as e:
                    self.create_errors += 1
                    del self.created[namespace][name]
                    warn(f"creating {namespace}/{name}", e)

        await asyncio.gather(*(one(n) for n in names))

    def restart_clock(self, namespace: str, at: float) -> None:
        """Every pod of the namespace counts as created at `at` (a backlog's drain starts then)."""
        self.created[namespace] = dict.fromkeys(self.created[namespace], at)

    def settled(self) -> bool:
        return all(
            len(self.bound[ns]) >= n and len(self.running[ns]) >= n
            for ns, n in self.expected.items()
        )

    async def wait(self, deadline: float, label: str) -> bool:
        """Until every pod is bound and running (the writes a pod costs include the device
        plugin's and the kubelet's after the Binding), or the deadline."""
        while not self.settled():
            left = deadline - time.monotonic()
            if left <= 0:
                bound = sum(map(len, self.bound.values()))
                running = sum(map(len, self.running.values()))
                total = sum(self.expected.values())
                print(
                    f"{label}: {bound}/{total} bound, {running} running before the deadline",
                    file=sys.stderr,
                    flush=True,
                )
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 5.0))
        return True

    def latencies(self, namespace: str) -> list[float]:
        created, bound = self.created[namespace], self.bound[namespace]
        return [bound[n] - created[n] for n in bound if n in created]


async def delete_pods(kubeconfig: str, namespace: str, pause: float = 5.0) -> None:
    """Delete the namespace's pods; a refusal (a 504 from a loaded API server) is a warning:
    the run's figures are already out, and the next run uses a namespace of its own."""
    try:
        api = await config.new_client_from_config(kubeconfig)
    except Exception as e:  # a warning, whatever it was
        warn(f"deleting the pods of {namespace}", e)
        return
    try:
        core = client.CoreV1Api(api)
        for attempt in range(3):
            try:
                await core.delete_collection_namespaced_pod(
                    namespace, grace_period_seconds=0, _request_timeout=300
                )
                return
            except Exception as e:  # a warning, whatever it was
                warn(f"deleting the pods of {namespace} (attempt {attempt + 1} of 3)", e)
                await asyncio.sleep(pause)
    finally:
        await api.close()
