"""Whether hami-py can take over from a running HAMi release without two schedulers binding,
judged from HAMi's objects as deployed (`hami migrate check`, docs/migrate-from-hami.md).

The chart's migration mode campaigns for HAMi's Lease (`scheduler.leaseName` in
`migration.hamiNamespace`) and serves `schedulerName`: the hand-over is safe when HAMi's
kube-scheduler takes that same Lease (or no longer runs) and serves that same schedulerName.
The chart's own lookup checks (helm/hami/templates/hami-check.yaml) refuse the same cases.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

Obj = dict[str, Any]

# kube-scheduler's own defaults for a KubeSchedulerConfiguration that leaves them out.
DEFAULT_ELECTION = {"leaderElect": True, "resourceName": "kube-scheduler"}
DEFAULT_LEASE_NAMESPACE = "kube-system"
# The chart's defaults: what needs no --set.
CHART = {"schedulerName": "hami-scheduler", "leaseName": "hami-scheduler", "hamiRelease": "hami"}
HAMI_WEBHOOK = "vgpu.hami.io"


def fullname(release: str) -> str:
    """The name prefix of a release of HAMi's chart (and of ours: both charts are `hami`)."""
    return (release if "hami" in release else f"{release}-hami")[:63].rstrip("-")


@dataclass(frozen=True, slots=True)
class Deployed:
    """HAMi's release's objects as read from the API server; None where there is none."""

    namespace: str
    release: str
    deployment: Obj | None
    configmap: Obj | None
    lease: Obj | None
    webhook: Obj | None


@dataclass(slots=True)
class Verdict:
    seen: list[str] = field(default_factory=list)  # what was read, one line each
    problems: list[str] = field(default_factory=list)  # each says what to do
    values: list[str] = field(default_factory=list)  # `--set` values for our install

    @property
    def safe(self) -> bool:
        return not self.problems


@dataclass(frozen=True, slots=True)
class Election:
    leader_elect: bool
    name: str
    namespace: str
    scheduler_names: tuple[str, ...]


def election(configmap: Obj) -> Election | None:
    """HAMi's kube-scheduler's configuration from its ConfigMap; None when it has none."""
    text = (configmap.get("data") or {}).get("config.yaml")
    if not isinstance(text, str):
        return None
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(config, Mapping):
        return None
    le = {**DEFAULT_ELECTION, **(config.get("leaderElection") or {})}
    profiles = config.get("profiles") or [{}]
    names = tuple(str(p.get("schedulerName", "default-scheduler")) for p in profiles)
    return Election(
        leader_elect=bool(le["leaderElect"]),
        name=str(le["resourceName"]),
        namespace=str(le.get("resourceNamespace") or DEFAULT_LEASE_NAMESPACE),
        scheduler_names=names,
    )


def judge(found: Deployed, our_release: str) -> Verdict:
    v = Verdict()
    ns, sched = found.namespace, f"{fullname(found.release)}-scheduler"
    where = f"{ns}/{sched}"
    if found.deployment is None and found.configmap is None:
        v.problems.append(
            f"no HAMi scheduler in {ns} (neither Deployment nor ConfigMap {sched}): give HAMi's "
            "release's namespace and name (--hami-namespace, --hami-release; `helm list -A` "
            "shows them)"
        )
        return v
    running = True
    if found.deployment is not None:
        replicas = int((found.deployment.get("spec") or {}).get("replicas", 1))
        running = replicas > 0
        v.seen.append(f"Deployment {where}: {replicas} replica(s)")
    le = election(found.configmap) if found.configmap is not None else None
    if le is None:
        v.seen.append(f"ConfigMap {where}: no kube-scheduler configuration in it")
    else:
        v.seen.append(
            f"ConfigMap {where}: schedulerName {', '.join(le.scheduler_names)}, leaderElect "
            f"{str(le.leader_elect).lower()}, Lease {le.namespace}/{le.name}"
        )
        _election(v, le, running, where, ns, sched)
    _lease(v, found.lease, le, ns)
    _webhook(v, found.webhook, fullname(found.release))
    if fullname(our_release) == fullname(found.release):
        v.problems.append(
            f"release {our_release} would take the names of HAMi's release {found.release}: "
            "install ours under another name (hami-py)"
        )
    if found.release != CHART["hamiRelease"]:
        v.values.append(f"migration.hamiRelease={found.release}")
    v.values.insert(0, f"migration.hamiNamespace={le.namespace if le else ns}")
    return v


def _election(v: Verdict, le: Election, running: bool, where: str, ns: str, sched: str) -> None:
    if running and not le.leader_elect:
        v.problems.append(
            f"HAMi's kube-scheduler runs with leaderElect false (ConfigMap {where}): it takes no "
            "Lease, so it would bind beside ours; stop it first "
            f"(kubectl -n {ns} scale deploy/{sched} --replicas=0)"
        )
    if le.namespace != ns and le.leader_elect:
        v.problems.append(
            f"HAMi's Lease is in {le.namespace}, not in its release's namespace {ns}: "
            "migration.hamiNamespace is both, so ours cannot follow it"
        )
    if le.name != CHART["leaseName"]:
        v.values.append(f"scheduler.leaseName={le.name}")
    if len(set(le.scheduler_names)) > 1:
        v.problems.append(
            f"HAMi's kube-scheduler serves several schedulerNames ({', '.join(le.scheduler_names)})"
            ": ours serves one"
        )
    elif le.scheduler_names[0] != CHART["schedulerName"]:
        v.values.append(f"schedulerName={le.scheduler_names[0]}")


def _lease(v: Verdict, lease: Obj | None, le: Election | None, ns: str) -> None:
    name = f"{le.namespace if le else ns}/{le.name if le else CHART['leaseName']}"
    if lease is None:
        v.seen.append(f"Lease {name}: none (HAMi's kube-scheduler has not taken it)")
        return
    holder = (lease.get("spec") or {}).get("holderIdentity") or "nobody"
    v.seen.append(f"Lease {name}: held by {holder}")


def _webhook(v: Verdict, webhook: Obj | None, hami: str) -> None:
    if webhook is None:
        v.seen.append(f"MutatingWebhookConfiguration {hami}-webhook: none")
        return
    hooks = webhook.get("webhooks") or []
    names = ", ".join(str(h.get("name")) for h in hooks)
    policies = ", ".join(sorted({str(h.get("failurePolicy", "Fail")) for h in hooks}))
    v.seen.append(
        f"MutatingWebhookConfiguration {hami}-webhook: {names}, failurePolicy {policies} "
        "(it reaches kube-system, ours does not)"
    )
