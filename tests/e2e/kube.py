"""kubectl-driven helpers for e2e tests: tests act on the cluster the way a user would."""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

Obj = dict[str, Any]
T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T], timeout: float, *, interval: float = 0.25, what: str = ""
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    Raises AssertionError after ``timeout`` seconds, quoting the last value seen, so a test that
    waits for the wrong thing says what it saw instead.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout:g}s waiting for {what or predicate!r}; "
                f"last value: {value!r}"
            )
        time.sleep(interval)


def eventually(check: Callable[[], None], timeout: float, interval: float = 0.5) -> None:
    """Run ``check`` until its assertions hold; after ``timeout`` its last failure is raised."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        time.sleep(interval)


class KubectlError(AssertionError):
    """A kubectl call that should have succeeded did not; carries kubectl's own words."""

    def __init__(self, args: Sequence[str], result: subprocess.CompletedProcess[str]):
        self.result = result
        super().__init__(
            f"kubectl {' '.join(args)} failed with exit code {result.returncode}:\n"
            f"{result.stderr.strip() or result.stdout.strip()}"
        )


class Kube:
    """The built kubectl, logged in as cluster admin, plus the queries tests keep repeating."""

    def __init__(
        self, kubectl: Path, kubeconfig: Path, manifests: Path, env: Mapping[str, str]
    ) -> None:
        self.kubectl_path = kubectl
        self.kubeconfig = kubeconfig
        self.manifests = manifests
        self.env = dict(env)
        self._manifest_ids = itertools.count(1)

    def __call__(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(self.kubectl_path), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
            check=False,
        )
        if result.returncode != 0 and result.stderr:
            # What the API server answered lands in the run folder, where the loopback guard
            # (tests/e2e/loopback.py) reads it: a webhook call it failed names its target here.
            with (self.manifests.parent / "kubectl.log").open("a") as log:
                log.write(f"$ kubectl {' '.join(args)}\n{result.stderr}\n")
        if check and result.returncode != 0:
            raise KubectlError(args, result)
        return result

    def apply(self, manifest: str, namespace: str | None = None) -> None:
        """``kubectl apply -f`` a YAML/JSON manifest, kept in the run folder for reruns by hand."""
        self.manifests.mkdir(exist_ok=True)
        path = self.manifests / f"{next(self._manifest_ids):03d}-{namespace or 'cluster'}.yaml"
        path.write_text(manifest)
        self("apply", "-f", str(path), *_ns(namespace))

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        result: Obj = json.loads(self("get", kind, name, "-o", "json", *_ns(namespace)).stdout)
        return result

    def pod(self, namespace: str, name: str) -> Obj:
        return self.get("pod", name, namespace)

    def pod_annotation(self, namespace: str, name: str, key: str) -> str | None:
        annotations: dict[str, str] = self.pod(namespace, name)["metadata"].get("annotations", {})
        return annotations.get(key)

    def pod_scheduled_message(self, namespace: str, name: str) -> str | None:
        """Message of the PodScheduled condition, where kube-scheduler explains a rejection."""
        for condition in self.pod(namespace, name).get("status", {}).get("conditions", []):
            if condition["type"] == "PodScheduled":
                message: str | None = condition.get("message")
                return message
        return None

    def pod_events(self, namespace: str, name: str) -> list[Obj]:
        """Events about one pod, oldest first."""
        selector = f"involvedObject.kind=Pod,involvedObject.name={name}"
        listing = json.loads(
            self(
                "get", "events", "-n", namespace, "--field-selector", selector, "-o", "json"
            ).stdout
        )
        events: list[Obj] = listing["items"]
        return sorted(events, key=_event_time)

    def wait_ready(self, namespace: str, pods: Sequence[str], timeout: float = 60) -> None:
        """Wait until every pod is Ready; on timeout, fail with each pod's state."""
        try:
            self(
                "wait",
                "--for=condition=Ready",
                f"--timeout={timeout:g}s",
                "-n",
                namespace,
                *(f"pod/{p}" for p in pods),
                timeout=timeout + 30,
            )
        except KubectlError as e:
            states = "\n".join(self.describe_pod(namespace, p) for p in pods)
            raise AssertionError(f"{e}\n{states}") from None

    def describe_pod(self, namespace: str, name: str) -> str:
        """A few lines on where a pod is stuck, for failure messages."""
        result = self("get", "pod", name, "-n", namespace, "-o", "json", check=False)
        if result.returncode != 0:
            return f"pod {namespace}/{name}: {result.stderr.strip()}"
        pod = json.loads(result.stdout)
        status = pod.get("status", {})
        lines = [
            f"pod {namespace}/{name}: phase={status.get('phase')} "
            f"node={pod['spec'].get('nodeName')} scheduler={pod['spec'].get('schedulerName')}"
        ]
        for condition in status.get("conditions", []):
            lines.append(
                f"  {condition['type']}={condition['status']} {condition.get('reason', '')} "
                f"{condition.get('message', '')}".rstrip()
            )
        for key, value in sorted(pod["metadata"].get("annotations", {}).items()):
            if key.startswith("hami.io/"):
                lines.append(f"  {key}: {value}")
        return "\n".join(lines)


def _ns(namespace: str | None) -> list[str]:
    return ["-n", namespace] if namespace else []


def _event_time(event: Obj) -> str:
    return str(
        event.get("eventTime")
        or event.get("lastTimestamp")
        or event["metadata"]["creationTimestamp"]
    )
