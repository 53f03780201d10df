"""One binder, checked (docs/migrate-from-hami.md): what the chart refuses from its values alone,
and what it and `hami migrate check` read from HAMi v2.10.0's own chart installed as Lab 14
installs it (tests/e2e/hamichart.py) on the real control plane, before anything of ours exists."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hami.cli import main
from tests.builders.chart import CHART, helm, notes, template_args
from tests.e2e.chartrun import helm_env

from .cluster import ControlPlane
from .hamichart import hold_lease, install_as_lab14, remove
from .hamichart import release_name as hami_release_name
from .kube import Kube

pytestmark = pytest.mark.e2e

BESIDE = "migration.hamiNamespace=kube-system"
HAMI_POD = "hami-scheduler-87f65f795-84l6d"


# --- from the values alone (helm template: no cluster) -----------------------------------------


@pytest.mark.parametrize(
    ("values", "release", "namespace", "message"),
    [
        (
            (BESIDE, "scheduler.leaderElect=false"),
            "hami-py",
            "hami-system",
            "scheduler.leaderElect=false would never campaign for HAMi's Lease",
        ),
        # HAMi's ClusterRole and webhook configuration are cluster-wide: another namespace
        # does not keep them apart.
        ((BESIDE,), "hami", "hami-system", "would take the names of HAMi's release hami"),
        (
            (BESIDE, "migration.hamiRelease=gpu"),
            "gpu",
            "hami-system",
            "would take the names of HAMi's release gpu",
        ),
    ],
)
def test_migration_values_that_would_make_a_second_binder_or_take_hamis_names_are_refused(
    values: tuple[str, ...], release: str, namespace: str, message: str
) -> None:
    result = helm(*template_args(*values, release=release, namespace=namespace), check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_the_notes_warn_of_a_second_scheduler_unless_beside_hami(tmp_path: Path) -> None:
    plain = " ".join(notes(tmp_path / "plain", "hami-system").split())
    assert "WARNING: if HAMi's scheduler runs on this cluster" in plain
    assert "both bind the same pods" in plain
    beside = " ".join(notes(tmp_path / "beside", "hami-system", BESIDE).split())
    assert "WARNING" not in beside
    assert "Lease kube-system/hami-scheduler" in beside


# --- HAMi's chart on the control plane ------------------------------------------------------------

Hami = Callable[..., tuple[str, str]]


@pytest.fixture
def hami(control_plane: ControlPlane, kube: Kube, tmp_path: Path) -> Iterator[Hami]:
    """Installs HAMi's chart as Lab 14 does, with extra values; its Lease held as its running
    kube-scheduler holds it. Returns (release, namespace); everything goes afterwards."""
    env = helm_env(control_plane, tmp_path)
    made: list[tuple[str, str]] = []

    def install(*sets: str, lease: str = "hami-scheduler") -> tuple[str, str]:
        release = hami_release_name()
        namespace = f"{release}-sys"
        kube("create", "namespace", namespace)
        made.append((release, namespace))
        install_as_lab14(release, namespace, env, *sets)
        hold_lease(kube, namespace, HAMI_POD, lease)
        return release, namespace

    yield install
    for release, namespace in made:
        remove(kube, release, namespace, env)


def check(
    control_plane: ControlPlane, release: str, namespace: str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    kubeconfig = str(control_plane.kubeconfig)
    argv = ["migrate", "check", "--kubeconfig", kubeconfig]
    rc = main([*argv, "--hami-namespace", namespace, "--hami-release", release])
    return rc, capsys.readouterr().out


def ours(control_plane: ControlPlane, tmp_path: Path, *sets: str) -> tuple[int, str]:
    """`helm install --dry-run=server` of our chart: lookup reads the cluster, nothing is made."""
    env = helm_env(control_plane, tmp_path)
    args = ["install", "hami-py", str(CHART), "-n", "hami-py-check", "--dry-run=server"]
    for value in sets:
        args += ["--set", value]
    result = helm(*args, env=env, check=False)
    return result.returncode, result.stderr


def test_hami_as_lab_14_installs_it_is_safe_to_take_over_with_the_values_check_prints(
    control_plane: ControlPlane, hami: Hami, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    release, namespace = hami()
    rc, out = check(control_plane, release, namespace, capsys)
    assert rc == 0, out
    assert f"Lease {namespace}/hami-scheduler: held by {HAMI_POD}_" in out
    assert f"MutatingWebhookConfiguration {release}-webhook: vgpu.hami.io" in out
    values = [f"migration.hamiNamespace={namespace}", f"migration.hamiRelease={release}"]
    assert " ".join(f"--set {v}" for v in values) in out
    assert ours(control_plane, tmp_path, *values) == (0, "")
    # The plain install (README) beside it: a second binder, refused, naming what was found.
    rc, err = ours(control_plane, tmp_path)
    assert rc != 0
    for found in (
        f"Deployment {namespace}/{release}-scheduler",
        f"Lease {namespace}/hami-scheduler",
        f"MutatingWebhookConfiguration {release}-webhook",
    ):
        assert found in err, err
    assert "install in migration mode" in err
    assert ours(control_plane, tmp_path, "migration.skipHamiCheck=true")[0] == 0


def test_hami_without_leader_election_is_refused_by_check_and_chart(
    control_plane: ControlPlane, hami: Hami, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    release, namespace = hami("scheduler.leaderElect=false")
    rc, out = check(control_plane, release, namespace, capsys)
    assert rc == 1, out
    assert "Not safe to hand over yet" in out and "leaderElect false" in out
    values = [f"migration.hamiNamespace={namespace}", f"migration.hamiRelease={release}"]
    rc, err = ours(control_plane, tmp_path, *values)
    assert rc != 0
    assert "runs with leaderElect: false" in err, err
    assert f"scale deploy/{release}-scheduler --replicas=0" in err


def test_hami_with_another_scheduler_name_gets_those_values(
    control_plane: ControlPlane, hami: Hami, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    release, namespace = hami("schedulerName=vgpu-sched", lease="vgpu-sched")
    rc, out = check(control_plane, release, namespace, capsys)
    assert rc == 0, out
    values = [
        f"migration.hamiNamespace={namespace}",
        "scheduler.leaseName=vgpu-sched",
        "schedulerName=vgpu-sched",
        f"migration.hamiRelease={release}",
    ]
    assert " ".join(f"--set {v}" for v in values) in out
    rc, err = ours(control_plane, tmp_path, values[0], values[3])
    assert rc != 0
    assert f"holds Lease {namespace}/vgpu-sched" in err, err
    rc, err = ours(control_plane, tmp_path, values[0], values[1], values[3])
    assert rc != 0
    assert "serves schedulerName vgpu-sched, ours hami-scheduler" in err, err
    assert ours(control_plane, tmp_path, *values) == (0, "")


def test_a_lease_named_as_our_scheduler_refuses_a_plain_install_only_while_held(
    control_plane: ControlPlane, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    hold_lease(kube, namespace, HAMI_POD)
    rc, err = ours(control_plane, tmp_path)
    assert rc != 0
    assert f"HAMi runs on this cluster (Lease {namespace}/hami-scheduler)" in err, err
    # What kube-scheduler leaves as it stops (ReleaseOnCancel): no holder.
    kube("-n", namespace, "patch", "lease", "hami-scheduler", "--type=merge",
         "-p", '{"spec": {"holderIdentity": ""}}')  # fmt: skip
    assert ours(control_plane, tmp_path) == (0, "")
