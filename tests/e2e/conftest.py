"""Fixtures for e2e tests: one control plane per pytest run, isolation per test.

* ``control_plane``: etcd, kube-apiserver, ``hami serve`` and kube-scheduler, started once.
* ``kube``: kubectl as cluster admin plus query helpers (:class:`tests.e2e.kube.Kube`).
* ``namespace``: a fresh namespace; its pods are force-deleted afterwards so that the next
  test's placements are not influenced by this test's GPU usage.
* ``node_tier``: the node tier (a real kubelet and the chart; ``HAMI_NODE_TIER=1``).
* ``nodesim``: ``nodesim(node, ...)`` registers fake GPU nodes and simulates their kubelet and
  device plugin; the nodes are deleted afterwards, so tests may reuse node names.

A failing test's report ends with the run folder and the tail of every component log.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Generator, Iterator

import pytest

from hami.engine.dra.config import DEFAULT_CLASSES

from .cluster import ControlPlane, FaultyApi, NodeSim, ensure_binaries
from .dradriver import SimulatedDraDriver
from .draworld import device_class, hami_dra_slice
from .kube import Kube
from .nodespec import NodeSpec, t4_node
from .nodetier.cluster import NodeCluster, node_cluster

# Lab 14's node and cards (examples/lab14/scenario.yaml).
LAB14_NODE = "gke-hami-policy-lab-default-pool-0c191cbd-fnwq"
LAB14_UUIDS = (
    "GPU-77b9c63c-e3cb-8207-c355-5f65d684d2d8",
    "GPU-f147e096-f059-d618-77b4-890c70ef7468",
    "GPU-66116373-061e-a66b-28a3-c60c4877e16e",
    "GPU-3c5f3637-e911-b226-7a4c-52da87c38aff",
)

_CONTROL_PLANE = pytest.StashKey[ControlPlane]()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The node tier runs last: its fixture moves pytest's thread into a private network
    namespace for the rest of the session, where the loopback tier's 127.0.0.1 is another."""
    items.sort(key=lambda item: item.get_closest_marker("node") is not None)


@pytest.fixture(scope="session")
def control_plane(pytestconfig: pytest.Config) -> Iterator[ControlPlane]:
    with ControlPlane(ensure_binaries()) as plane:
        pytestconfig.stash[_CONTROL_PLANE] = plane
        try:
            yield plane
        finally:
            del pytestconfig.stash[_CONTROL_PLANE]


@pytest.fixture
def kube(control_plane: ControlPlane) -> Kube:
    return control_plane.kube


@pytest.fixture
def namespace(kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{slug}-{secrets.token_hex(3)}"
    kube("create", "namespace", name)
    yield name
    # Without kube-controller-manager a namespace never finishes deleting; its pods can go.
    kube(
        "delete",
        "pods",
        "--all",
        "-n",
        name,
        "--force",
        "--grace-period=0",
        "--wait=true",
        "--timeout=60s",
        timeout=90,
    )
    # A test's Lease stand-in, left held, is what a running kube-scheduler leaves: the chart
    # refuses a later plain install beside it (helm/hami/templates/hami-check.yaml).
    kube("delete", "leases", "--all", "-n", name)


@pytest.fixture
def ignored(kube: Kube) -> Iterator[str]:
    """A namespace an administrator exempted (labelled hami.io/webhook=ignore): the webhook never
    sees it, so what is refused there, kube-apiserver refused."""
    name = f"ignored-{secrets.token_hex(3)}"
    kube("create", "namespace", name)
    kube("label", "namespace", name, "hami.io/webhook=ignore")
    yield name
    kube("delete", "pods", "--all", "-n", name, "--force", "--grace-period=0", timeout=90)


@pytest.fixture(scope="module", params=["with-policy", "without-policy"])
def admission_policy(request: pytest.FixtureRequest, control_plane: ControlPlane) -> Iterator[bool]:
    """Each test of a module that asks for it runs twice: with the chart's admission policy, and
    without it, as on Kubernetes before 1.30 or with admissionPolicy.enabled=false."""
    if request.param == "with-policy":
        yield True
        return
    control_plane.drop_admission_policy()
    try:
        yield False
    finally:
        control_plane.apply_admission_policy()


@pytest.fixture
def nodesim(control_plane: ControlPlane) -> Iterator[Callable[..., NodeSim]]:
    started: list[NodeSim] = []

    def start(*nodes: NodeSpec) -> NodeSim:
        sim = control_plane.start_nodesim(nodes)
        started.append(sim)
        return sim

    yield start
    for sim in reversed(started):
        sim.stop()
        control_plane.kubectl(
            "delete", "nodes", *sim.names, "--ignore-not-found", "--wait=true", "--timeout=60s"
        )


@pytest.fixture
def app_args(control_plane: ControlPlane) -> Iterator[Callable[..., None]]:
    """Restart our process with other flags for one test, and put the defaults back after it."""
    changed = False

    def use(*args: str) -> None:
        nonlocal changed
        changed = True
        control_plane.restart_app(extra_args=args)

    yield use
    if changed:
        control_plane.restart_app(extra_args=())


@pytest.fixture
def faulty(control_plane: ControlPlane, app_args: Callable[..., None]) -> FaultyApi:
    """Our process, talking to kube-apiserver through a fault proxy for this test."""
    api = control_plane.start_fault_proxy()
    app_args("--kubeconfig", str(api.kubeconfig))
    return api


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    plane = item.config.stash.get(_CONTROL_PLANE, None)
    if report.failed and plane is not None:
        report.sections.append(("e2e control plane", plane.failure_report()))
    return report


@pytest.fixture(scope="session")
def node_tier(pytestconfig: pytest.Config) -> Iterator[NodeCluster]:
    """The node tier (HAMI_NODE_TIER=1): one real node with Lab 14's four fake T4s."""
    with node_cluster(t4_node(LAB14_NODE, LAB14_UUIDS)) as cluster:
        # Failure reports tail this plane's logs while the tier runs, the loopback one's after.
        loopback = pytestconfig.stash.get(_CONTROL_PLANE, None)
        pytestconfig.stash[_CONTROL_PLANE] = cluster.plane
        try:
            yield cluster
        finally:
            if loopback is None:
                del pytestconfig.stash[_CONTROL_PLANE]
            else:
                pytestconfig.stash[_CONTROL_PLANE] = loopback


# DRA mode's world (tests/e2e/draworld.py), for every module that places DRA-mode pods.
@pytest.fixture(scope="module")
def dra_mode(control_plane: ControlPlane) -> Iterator[None]:
    kube = control_plane.kube
    for c in DEFAULT_CLASSES:
        kube("apply", "-f", "-", stdin=json.dumps(device_class(c.device_class)))
    control_plane.restart_app(extra_args=("--dra-mode=all",))
    try:
        yield
    finally:
        control_plane.restart_app(extra_args=())
        for c in DEFAULT_CLASSES:
            kube("delete", "deviceclass", c.device_class, "--ignore-not-found", check=False)


@pytest.fixture
def dra_node(
    kube: Kube, nodesim: Callable[..., NodeSim]
) -> Iterator[Callable[[str, int], list[str]]]:
    """Start a simulated node of `cards` T4s, registered by the device plugin stand-in and
    published in a HAMi-DRA slice under the same UUIDs; its UUIDs. Slices go afterwards."""
    made: list[str] = []

    def start(node: str, cards: int) -> list[str]:
        uuids = [f"GPU-{node}-{i}" for i in range(cards)]
        nodesim(t4_node(node, uuids))
        kube("create", "-f", "-", stdin=json.dumps(hami_dra_slice(node, uuids)))
        made.append(f"{node}-hami-dra")
        return uuids

    yield start
    for name in made:
        kube("delete", "resourceslice", name, "--ignore-not-found", check=False)


@pytest.fixture
def dra(kube: Kube) -> Iterator[SimulatedDraDriver]:
    """The simulated HAMi-DRA driver (tests/e2e/dradriver.py): its DeviceClass, the slices a
    test publishes, and the claim controller's release; all removed afterwards."""
    driver = SimulatedDraDriver(kube)
    yield driver
    driver.close()
