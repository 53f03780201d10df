"""The chart's migration mode (docs/migrate-from-hami.md): beside HAMi's release, ours follows
HAMi's Lease, renders nothing HAMi's chart owns, and lets HAMi's scheduler keep writing."""

from __future__ import annotations

import pytest

from tests.builders.chart import (
    EXTENDER,
    container,
    find,
    helm,
    render,
    scheduler_config,
    template_args,
)

pytestmark = pytest.mark.e2e  # renders with helm, which the e2e tier builds

BESIDE = "migration.hamiNamespace=kube-system"


@pytest.mark.parametrize("preset", ["", "gke"])
def test_beside_hami_ours_campaigns_for_hamis_lease_and_renders_no_device_plugin(
    preset: str,
) -> None:
    docs = render(BESIDE, *([f"preset={preset}"] if preset else []))
    assert "DaemonSet" not in {d["kind"] for d in docs}
    election = scheduler_config(docs)["leaderElection"]
    assert (election["resourceName"], election["resourceNamespace"]) == (
        "hami-scheduler",
        "kube-system",
    )
    assert "--leader-elect-resource-namespace=kube-system" in container(docs, EXTENDER)["args"]
    # Only the Lease's Role and RoleBinding go into HAMi's namespace, under our names (beside
    # kube-scheduler's auth-reader binding, which kube-system always gets).
    assert {
        (d["kind"], d["metadata"]["name"])
        for d in docs
        if d["metadata"].get("namespace") == "kube-system"
    } == {
        ("Role", "hami-py-scheduler"),
        ("RoleBinding", "hami-py-scheduler"),
        ("RoleBinding", "hami-py-scheduler-auth-reader"),
    }
    lease_role = find([d for d in docs if d["metadata"].get("namespace") == "kube-system"], "Role")
    assert {r["resources"][0] for r in lease_role["rules"]} == {"leases"}
    # The certificate Secret's rules stay in our namespace.
    ours = find([d for d in docs if d["metadata"].get("namespace") == "hami-system"], "Role")
    assert {r["resources"][0] for r in ours["rules"]} == {"secrets"}
    policy = find(docs, "ValidatingAdmissionPolicy")
    text = str(policy)
    assert "system:serviceaccount:kube-system:hami-scheduler" in text
    assert "system:serviceaccount:kube-system:hami-device-plugin" in text


def test_without_migration_the_lease_stays_in_the_release_namespace() -> None:
    docs = render()
    assert scheduler_config(docs)["leaderElection"]["resourceNamespace"] == "hami-system"
    assert "system:serviceaccount:kube-system:hami-scheduler'" not in str(
        find(docs, "ValidatingAdmissionPolicy")
    )


@pytest.mark.parametrize(
    ("values", "release", "namespace", "message"),
    [
        ((BESIDE, "devicePlugin.enabled=true"), "hami-py", "hami-system", "a second one"),
        ((BESIDE,), "hami", "kube-system", "would take the names of HAMi's release hami"),
    ],
)
def test_what_would_collide_with_hamis_release_is_refused(
    values: tuple[str, ...], release: str, namespace: str, message: str
) -> None:
    result = helm(*template_args(*values, release=release, namespace=namespace), check=False)
    assert result.returncode != 0
    assert message in result.stderr
