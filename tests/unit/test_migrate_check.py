"""`hami migrate check`'s judgement of HAMi's release as deployed (hami.service.migration), and
its answer when the API server does not answer. Against the real control plane with HAMi's own
chart: tests/e2e/test_migrate_check.py."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hami.cli import main
from hami.service.migration import Deployed, judge


def config(*, leader_elect: bool = True, name: str = "hami-scheduler", ns: str = "kube-system",
           scheduler: str = "hami-scheduler") -> dict[str, object]:  # fmt: skip
    """HAMi v2.10's chart's kube-scheduler ConfigMap (templates/scheduler/configmap.yaml)."""
    text = (
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        f"leaderElection:\n  leaderElect: {str(leader_elect).lower()}\n"
        f'  resourceName: "{name}"\n  resourceNamespace: "{ns}"\n'
        f"profiles:\n- schedulerName: {scheduler}\n"
    )
    return {"data": {"config.yaml": text}}


def deployed(replicas: int = 1, release: str = "hami", **kw: object) -> Deployed:
    return Deployed(
        namespace="kube-system",
        release=release,
        deployment={"spec": {"replicas": replicas}},
        configmap=config(**kw),  # type: ignore[arg-type]
        lease={"spec": {"holderIdentity": "hami-scheduler-87f65f795-84l6d_x"}},
        webhook={"webhooks": [{"name": "vgpu.hami.io", "failurePolicy": "Ignore"}]},
    )


def test_hamis_release_as_lab_14_installs_it_is_safe_with_the_namespace_alone() -> None:
    v = judge(deployed(), "hami-py")
    assert v.safe, v.problems
    assert v.values == ["migration.hamiNamespace=kube-system"]
    assert any("held by hami-scheduler-87f65f795-84l6d_x" in line for line in v.seen)


def test_a_hami_scheduler_without_leader_election_is_refused_while_it_runs() -> None:
    v = judge(deployed(leader_elect=False), "hami-py")
    assert not v.safe
    assert "leaderElect false" in v.problems[0]
    assert "kubectl -n kube-system scale deploy/hami-scheduler --replicas=0" in v.problems[0]
    assert judge(deployed(replicas=0, leader_elect=False), "hami-py").safe


def test_another_schedulername_lease_or_release_name_is_passed_as_values() -> None:
    v = judge(deployed(release="gpu", name="vgpu", scheduler="vgpu"), "hami-py")
    assert v.safe, v.problems
    assert v.values == [
        "migration.hamiNamespace=kube-system",
        "scheduler.leaseName=vgpu",
        "schedulerName=vgpu",
        "migration.hamiRelease=gpu",
    ]


@pytest.mark.parametrize(
    ("found", "ours", "problem"),
    [
        (deployed(ns="other"), "hami-py", "not in its release's namespace"),
        (deployed(), "hami", "would take the names of HAMi's release hami"),
        (
            Deployed("kube-system", "hami", None, None, None, None),
            "hami-py",
            "no HAMi scheduler in kube-system",
        ),
    ],
)
def test_what_cannot_be_handed_over_says_why(found: Deployed, ours: str, problem: str) -> None:
    v = judge(found, ours)
    assert not v.safe
    assert problem in " ".join(v.problems)


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A loopback port that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def test_an_api_server_that_never_answers_is_named(
    silent_server: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = f"http://127.0.0.1:{silent_server}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    rc = main(["migrate", "check", "--kubeconfig", str(kubeconfig), "--timeout", "0.5"])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"the API server {server} did not answer within 0.5 s" in err, err
    assert "get configmap kube-system/hami-scheduler" in err
