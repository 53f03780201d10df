"""The standing attack suite: what a pod author or a stray client tried, and how it fails now.

Each test ends with the invariant computed from the API server (tests/e2e/invariant.py): no
card over its memory, cores or split count, and our process's view equal to a cache rebuilt
from a fresh LIST. Every loop is bounded in count and time; every target is on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import replace

import aiohttp
import pytest

from tests.builders.chart import ADMISSION_POLICY_REFUSED

from .cluster import AS_PLUGIN, AS_SCHEDULER, DEVICE_PLUGIN_USER, ControlPlane, NodeSim
from .invariant import differences, locks_left, overcommitted, rebuilt, served
from .kube import Kube, wait_for
from .nodespec import t4_node

pytestmark = pytest.mark.e2e

FOUR_CARDS = "".join(f"GPU-{{node}}-{i},NVIDIA,15360,100:" for i in range(4)) + ";"


def gpu_pod(name: str, *, whole_card: bool = False, labels: str = "") -> str:
    """kubectl's manifest of a GPU pod (a share or a whole card), `labels` spliced into its
    metadata as flow-style YAML."""
    memory = "nvidia.com/gpumem-percentage: 100" if whole_card else "nvidia.com/gpumem: 1000"
    return f"""\
apiVersion: v1
kind: Pod
metadata: {{name: {name}{labels}}}
spec:
  containers:
  - name: cuda
    image: busybox
    resources: {{limits: {{nvidia.com/gpu: 1, {memory}}}}}
"""


def busybox(name: str, annotations: dict[str, str]) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations},
            # Nobody schedules it: it only sits in the cache with what it claims.
            "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}]},
        }
    )


def assert_invariant(control_plane: ControlPlane, kube: Kube) -> None:
    assert overcommitted(kube) == []
    # Phantom reservations of made-up pods expire within seconds; then the views agree.
    wait_for(
        lambda: not differences(served(control_plane), rebuilt(kube)),
        timeout=30,
        what="our cache to equal a cache rebuilt from a fresh LIST: "
        + "; ".join(differences(served(control_plane), rebuilt(kube))),
    )


def refused(kube: Kube, *args: str, stdin: str | None = None) -> str:
    """kubectl's error for a call that must fail."""
    result = kube(*args, stdin=stdin, check=False)
    assert result.returncode != 0, f"kubectl {' '.join(args)} was accepted"
    return result.stderr


# --- forged scheduling state -----------------------------------------------------------------


def test_forged_allocation_on_create_is_refused_by_the_api_server(
    control_plane: ControlPlane, kube: Kube, ignored: str, nodesim: Callable[..., NodeSim]
) -> None:
    node = t4_node("forge-create")
    nodesim(node)
    for key, value in (
        ("hami.io/vgpu-devices-allocated", FOUR_CARDS.format(node=node.name)),
        ("hami.io/vgpu-node", node.name),
        ("hami.io/bind-phase", "success"),
    ):
        forged = busybox("forged", {key: value})
        message = refused(kube, "create", "-n", ignored, "-f", "-", stdin=forged)
        assert ADMISSION_POLICY_REFUSED in message and key in message, message
    assert_invariant(control_plane, kube)


def test_forged_allocation_by_update_is_refused_and_the_card_stays_full(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    node = t4_node("forge-update", [f"GPU-forge-update-{i}" for i in range(1)])
    nodesim(node)
    kube.apply(gpu_pod("tenant", whole_card=True), namespace)
    kube.wait_ready(namespace, ["tenant"])
    written = kube.pod_annotation(namespace, "tenant", "hami.io/vgpu-devices-allocated")
    shrunk = f"hami.io/vgpu-devices-allocated=GPU-{node.name}-0,NVIDIA,1,0:;"
    attempts = (
        ("annotate", "--overwrite", "pod", "tenant", shrunk),
        ("annotate", "pod", "tenant", "hami.io/vgpu-node-"),
        ("annotate", "--overwrite", "pod", "tenant", "hami.io/bind-phase=allocating"),
    )
    for args in attempts:
        message = refused(kube, *args, "-n", namespace)
        assert ADMISSION_POLICY_REFUSED in message and "admin" in message, message
    # The status subresource carries metadata too.
    patch = json.dumps({"metadata": {"annotations": {"hami.io/vgpu-devices-allocated": "x"}}})
    message = refused(
        kube, "patch", "pod", "tenant", "-n", namespace, "--subresource=status", "-p", patch
    )
    assert ADMISSION_POLICY_REFUSED in message, message
    # The device plugin may report the bind phase, not rewrite the allocation.
    as_plugin = ("annotate", *AS_PLUGIN, "--overwrite", "-n", namespace, "pod", "tenant")
    kube(*as_plugin, "hami.io/bind-phase=success")
    message = refused(kube, *as_plugin, shrunk)
    assert ADMISSION_POLICY_REFUSED in message and DEVICE_PLUGIN_USER in message, message
    assert kube.pod_annotation(namespace, "tenant", "hami.io/vgpu-devices-allocated") == written
    # The card is still full: the next whole-card pod stays Pending.
    kube.apply(gpu_pod("next", whole_card=True), namespace)
    wait_for(
        lambda: (
            "CardInsufficientMemory" in (kube.pod_scheduled_message(namespace, "next") or "")
            or "CardTimeSlicingExhausted" in (kube.pod_scheduled_message(namespace, "next") or "")
            or "Insufficient" in (kube.pod_scheduled_message(namespace, "next") or "")
        ),
        timeout=30,
        what="the second whole-card pod to be refused",
    )
    assert not kube.pod(namespace, "next")["spec"].get("nodeName")
    assert_invariant(control_plane, kube)


def test_node_scheduling_state_is_written_by_the_scheduler_and_plugin_only(
    control_plane: ControlPlane, kube: Kube, nodesim: Callable[..., NodeSim]
) -> None:
    node = t4_node("forge-node")
    nodesim(node)
    lock = "hami.io/mutex.lock=2026-01-01T00:00:00Z,ns,p"
    for args in (
        ("annotate", "--overwrite", "node", node.name, "hami.io/node-nvidia-register=[]"),
        ("annotate", "node", node.name, "hami.io/node-nvidia-register-"),
        ("annotate", "--overwrite", "node", node.name, lock),
    ):
        assert ADMISSION_POLICY_REFUSED in refused(kube, *args)
    # The device plugin may release the scheduler's lock but never take one.
    assert ADMISSION_POLICY_REFUSED in refused(
        kube, "annotate", *AS_PLUGIN, "node", node.name, lock
    )
    kube("annotate", *AS_SCHEDULER, "node", node.name, lock)
    kube("annotate", *AS_PLUGIN, "node", node.name, "hami.io/mutex.lock-")
    # Annotations that are not scheduling state stay the administrator's.
    kube("annotate", "node", node.name, "hami.io/device-cordon=GPU-forge-node-3")
    kube("annotate", "node", node.name, "hami.io/device-cordon-")
    assert_invariant(control_plane, kube)


def test_without_the_policy_the_cache_still_ignores_allocations_that_do_not_add_up(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    ignored: str,
    nodesim: Callable[..., NodeSim],
) -> None:
    """A cluster older than 1.30 (no ValidatingAdmissionPolicy): the second line holds."""
    node = t4_node("no-policy")
    nodesim(node)
    squat = busybox(
        "squat",
        {
            "hami.io/vgpu-node": node.name,
            "hami.io/vgpu-devices-allocated": FOUR_CARDS.format(node=node.name),
        },
    )
    control_plane.drop_admission_policy()
    try:
        kube.apply(squat, ignored)
    finally:
        control_plane.apply_admission_policy()
    # The four cards it claims are free for real GPU pods.
    pods = [f"real-{i}" for i in range(4)]
    for name in pods:
        kube.apply(gpu_pod(name, whole_card=True), namespace)
    kube.wait_ready(namespace, pods)
    log = control_plane.app_log.read_text()
    assert "allocation annotation not counted as written" in log and '"squat"' in log
    # /bind of the squatter is refused: its annotations are no decision of ours.
    answer = post_extender(
        control_plane,
        "bind",
        {"PodName": "squat", "PodNamespace": ignored, "PodUID": "", "Node": node.name},
    )
    assert "has no placement" in str(answer["Error"]), answer
    assert not kube.pod(ignored, "squat")["spec"].get("nodeName")
    assert_invariant(control_plane, kube)


def post_extender(control_plane: ControlPlane, verb: str, body: object) -> dict[str, object]:
    request = urllib.request.Request(
        f"{control_plane.extender_url}/{verb}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=30) as response:
        answer: dict[str, object] = json.loads(response.read())
        return answer


# --- the extender answers kube-scheduler only ---------------------------------------------------


def tls_context(control_plane: ControlPlane) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(control_plane.app_tls.ca_file))


def test_filter_and_bind_are_not_on_the_webhook_port(control_plane: ControlPlane) -> None:
    """The port kube-apiserver (and anyone on the pod network) reaches has no extender verbs."""

    async def status(verb: str) -> int:
        async with (
            aiohttp.ClientSession(trust_env=False) as session,
            session.post(
                f"{control_plane.app_url}/{verb}", data=b"{}", ssl=tls_context(control_plane)
            ) as r,
        ):
            return r.status

    async def both() -> list[int]:
        return [await status("filter"), await status("bind")]

    assert asyncio.run(both()) == [404, 404]


def test_phantom_filters_for_made_up_pods_release_their_cards_within_seconds(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    node = t4_node("phantom")
    nodesim(node)
    whole = {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}
    for i in range(8):  # twice the node's cards: every card is reserved by a ghost
        answer = post_extender(
            control_plane,
            "filter",
            {
                "Pod": {
                    "metadata": {"name": f"ghost-{i}", "namespace": "x", "uid": f"ghost-uid-{i}"},
                    "spec": {"containers": [{"name": "c", "resources": {"limits": whole}}]},
                },
                "NodeNames": [node.name],
            },
        )
        assert answer.get("nodenames") == ([node.name] if i < 4 else None), answer
    started = time.monotonic()
    cards = [c.uuid for c in node.cards]

    def freed() -> bool:
        usage = served(control_plane)
        return all(usage[c].empty for c in cards)

    # The ghosts' reservations outlive 5 s (plus the 5 s expiry sweep), not the 120 s TTL.
    wait_for(freed, timeout=20, what="the phantom reservations to expire")
    print(f"four phantom reservations released after {time.monotonic() - started:.1f}s")
    kube.apply(gpu_pod("real", whole_card=True), namespace)
    kube.wait_ready(namespace, ["real"])
    answer = post_extender(
        control_plane,
        "bind",
        {"PodName": "ghost-0", "PodNamespace": "x", "PodUID": "ghost-uid-0", "Node": node.name},
    )
    assert answer["Error"], "a bind for a pod that does not exist is refused"
    assert_invariant(control_plane, kube)


# --- bounded work for any input -----------------------------------------------------------------


async def probe_healthz(
    control_plane: ControlPlane, stop: asyncio.Event, seen: list[float]
) -> None:
    """Round trips of /healthz on the webhook port while an attack runs."""
    async with aiohttp.ClientSession(trust_env=False) as session:
        while not stop.is_set():
            started = time.monotonic()
            async with session.get(
                f"{control_plane.app_url}/healthz", ssl=tls_context(control_plane)
            ) as r:
                assert r.status == 200
            seen.append(time.monotonic() - started)
            await asyncio.sleep(0.02)


def test_slow_clients_are_cut_off_and_others_are_still_served(
    control_plane: ControlPlane,
) -> None:
    """200 connections that never finish their TLS handshake or their headers (slowloris)."""

    async def attack() -> tuple[int, float, list[float]]:
        host, port = "127.0.0.1", control_plane.app_port
        silent = [await asyncio.open_connection(host, port) for _ in range(100)]
        half = []
        for _ in range(100):
            reader, writer = await asyncio.open_connection(
                host, port, ssl=tls_context(control_plane), server_hostname="127.0.0.1"
            )
            writer.write(b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-")
            await writer.drain()
            half.append((reader, writer))
        stop, seen = asyncio.Event(), list[float]()
        probe = asyncio.create_task(probe_healthz(control_plane, stop, seen))
        started = time.monotonic()

        async def closed(reader: asyncio.StreamReader) -> None:
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await reader.read()

        async with asyncio.timeout(30):
            await asyncio.gather(*(closed(r) for r, _ in [*silent, *half]))
        elapsed = time.monotonic() - started
        stop.set()
        await probe
        for _, writer in [*silent, *half]:
            writer.close()
        return len(silent) + len(half), elapsed, seen

    count, elapsed, seen = asyncio.run(attack())
    print(f"{count} slow connections closed by the server after {elapsed:.1f}s")
    print(f"/healthz meanwhile: {len(seen)} probes, slowest {max(seen) * 1000:.1f} ms")
    assert elapsed < 15, "the read deadline (10 s) closes them"
    assert len(seen) > 10


# --- a crash in the middle of binds ---------------------------------------------------------------


def test_kill_9_during_a_burst_leaves_no_node_blocked(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    """SIGKILL between a bind's lock and its Binding: the restarted process reclaims the lock of
    a pod that went elsewhere at once, instead of after HAMi's five-minute expiry."""
    # Each plugin Allocate takes half a second, so a lock is held long enough to be seen
    # (a burst on a fast machine could otherwise come and go between two polls).
    nodes = [replace(t4_node(n), allocate_delay=0.5) for n in ("crash-a", "crash-b")]
    nodesim(*nodes)
    pods = [f"crash-{i:02d}" for i in range(24)]
    kube.apply("\n---\n".join(gpu_pod(p) for p in pods), namespace)
    app = control_plane.app
    assert app is not None
    wait_for(
        lambda: locks_left(kube, [n.name for n in nodes]),
        timeout=60,
        what="the first bind to take a node lock",
    )
    app.popen.kill()
    app.popen.wait(10)
    started = time.monotonic()
    control_plane.restart_app()  # the killed process is gone: this only starts a new one
    kube.wait_ready(namespace, pods, timeout=120)
    print(f"all {len(pods)} pods Ready {time.monotonic() - started:.1f}s after the restart")
    assert time.monotonic() - started < 120
    assert_invariant(control_plane, kube)


def test_huge_gpu_counts_are_refused_at_once(
    control_plane: ControlPlane, kube: Kube, namespace: str
) -> None:
    """Two billion cards once looped over every index on the event loop; now a denial."""
    for count in ("2000000000", "1Ei", "65"):
        pod = gpu_pod("huge").replace("nvidia.com/gpu: 1", f"nvidia.com/gpu: {count}")
        message = refused(kube, "create", "-n", namespace, "-f", "-", stdin=pod)
        assert "per container are supported" in message, message
    assert (
        urllib.request.urlopen(
            f"{control_plane.app_url}/healthz", context=tls_context(control_plane), timeout=5
        ).status
        == 200
    )


def test_a_pod_authors_ignore_label_skips_the_mutation_not_the_checks(
    control_plane: ControlPlane, kube: Kube, namespace: str
) -> None:
    labelled = gpu_pod("ignored", labels=", labels: {hami.io/webhook: ignore}")
    privileged = labelled.replace(
        "    resources:", "    securityContext: {privileged: true}\n    resources:"
    )
    message = refused(kube, "create", "-n", namespace, "-f", "-", stdin=privileged)
    assert "is privileged" in message, message
    kube("create", "-n", namespace, "-f", "-", "--dry-run=server", stdin=labelled)


# --- fuzzed input ---------------------------------------------------------------------------------

FUZZ_SEED = 20261203


async def _post_all(
    url: str, bodies: Iterator[bytes], ssl_context: ssl.SSLContext | None, deadline: float
) -> list[tuple[int, bytes]]:
    """Every body POSTed over a few keep-alive connections; (status, answer) each."""
    answers: list[tuple[int, bytes]] = []
    queue = list(bodies)
    connector = aiohttp.TCPConnector(limit=8, ssl=ssl_context if ssl_context else False)
    async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:

        async def worker() -> None:
            while queue:
                body = queue.pop()
                async with session.post(
                    url, data=body, headers={"Content-Type": "application/json"}
                ) as r:
                    answers.append((r.status, await r.read()))

        async with asyncio.timeout(deadline):
            await asyncio.gather(*(worker() for _ in range(8)))
    return answers


def test_ten_thousand_fuzzed_reviews_are_each_answered_without_an_internal_error(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    from .fuzz import review_bodies

    nodesim(t4_node("fuzz-review"))
    started = time.monotonic()
    answers = asyncio.run(
        _post_all(
            f"{control_plane.app_url}/webhook",
            review_bodies(FUZZ_SEED, 10_000),
            tls_context(control_plane),
            deadline=240,
        )
    )
    outcomes: dict[str, int] = {}
    for status, body in answers:
        assert status == 200, body[:200]
        response = json.loads(body)["response"]
        code = response.get("status", {}).get("code", 200)
        assert code != 500, response  # an exception inside admission
        key = "allowed" if response["allowed"] else str(code)
        outcomes[key] = outcomes.get(key, 0) + 1
    print(f"{len(answers)} fuzzed reviews in {time.monotonic() - started:.1f}s: {outcomes}")
    assert len(answers) == 10_000 and outcomes.get("allowed") and outcomes.get("400")
    kube.apply(gpu_pod("after-review-fuzz"), namespace)
    kube.wait_ready(namespace, ["after-review-fuzz"])
    assert_invariant(control_plane, kube)


def test_three_thousand_fuzzed_extender_requests_leave_no_trace(
    control_plane: ControlPlane, kube: Kube, namespace: str, nodesim: Callable[..., NodeSim]
) -> None:
    from .fuzz import bind_bodies, filter_bodies

    nodes = [t4_node("fuzz-a"), t4_node("fuzz-b")]
    nodesim(*nodes)
    names = [n.name for n in nodes]
    started = time.monotonic()
    answers: list[tuple[int, bytes]] = []
    for verb, bodies in (
        ("filter", filter_bodies(FUZZ_SEED, 2_000, names)),
        ("bind", bind_bodies(FUZZ_SEED, 1_000, names)),
    ):
        answers += asyncio.run(
            _post_all(f"{control_plane.extender_url}/{verb}", bodies, None, deadline=180)
        )
    crashed = [b for s, b in answers if s != 200 or b"cannot filter this pod" in b]
    print(f"{len(answers)} fuzzed extender requests in {time.monotonic() - started:.1f}s")
    assert len(answers) == 3_000 and crashed == [], crashed[:3]
    # The fuzzed filters reserved cards for pods that do not exist; they expire within seconds,
    # and a real pod then lands.
    assert_invariant(control_plane, kube)
    kube.apply(gpu_pod("after-extender-fuzz", whole_card=True), namespace)
    kube.wait_ready(namespace, ["after-extender-fuzz"])
    assert_invariant(control_plane, kube)
