"""`hami serve`'s wiring: the parts of one process serving the webhook, the extender, health
and metrics, and what they tell each other (hami.runtime.serving runs them).

The parts that decide are built from the run's choices (hami.runtime.choices); the rest,
long-lived too, is built here from the settings; everything is passed explicitly, nothing is
global.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hami.cache.freshness import Freshness, limits
from hami.cache.store import ClusterCache
from hami.certs.bootstrap import CertBootstrap
from hami.certs.tls import ReloadingServerContext
from hami.kube.client import Kube
from hami.kube.connect import connect
from hami.kube.events import EventReason, EventRecorder
from hami.kube.informer import RECONNECT_CAP, Informer
from hami.kube.leader import AlwaysLeader, Leadership, LeaseLeadership
from hami.kube.limiter import WriteLimiter
from hami.runtime.apps import each
from hami.runtime.certsetup import certificates, pair, serving_context
from hami.runtime.choices import of_settings
from hami.runtime.config import Settings, bind_budget
from hami.runtime.dramode import dra_config, dra_placer
from hami.runtime.metrics import Metrics, Probes
from hami.runtime.podwatch import PodWatchers, Sink
from hami.runtime.preflight import require_admission_policy, require_dra_api
from hami.runtime.reporting import FilterReporter
from hami.runtime.sight import Sight
from hami.service.admission import AdmissionService
from hami.service.binding import Binder
from hami.service.draplacer import DraPlacer
from hami.service.labels import LabelMender
from hami.service.limits import LimitsWriter
from hami.service.placement import Placement
from hami.service.pluginrefusal import PluginRefusals
from hami.service.preemption.facts import PodFacts
from hami.service.preemption.preempter import Preempter
from hami.service.requeue import Requeuer

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: Settings
    kube: Kube
    cache: ClusterCache
    informers: tuple[Informer, ...]
    leadership: Leadership
    events: EventRecorder
    requeuer: Requeuer
    labels: LabelMender
    placement: Placement
    binder: Binder
    admission: AdmissionService
    metrics: Metrics
    tls: ReloadingServerContext
    freshness: Freshness
    sight: Sight
    # Set when the process makes and rotates its own certificate (--cert-bootstrap-secret).
    certs: CertBootstrap | None = None
    placer: DraPlacer | None = None  # DRA mode's (docs/dra.md)
    closing: bool = False

    async def paced(self) -> None:
        """Hold a filter while the API server is behind with our writes (WriteLimiter.room) or
        binds queue on node locks beyond what the nodes take in turn (NodeLocker.room), at most
        a third of a bind's budget in all: the decision is then made anyway."""
        loop = asyncio.get_running_loop()
        until = loop.time() + self.binder.budget.total / 3
        await self.kube.writes.room(until - loop.time())
        # Binds spread by how many are ahead of them on each node (hami.service.placement);
        # per node, as many as are served within a bind's lock wait (NodeLocker.per_node).
        nodes = max(1, len(self.cache.view))
        wait = min(self.binder.lock_wait, self.binder.budget.lock_wait)
        await self.binder.locker.room(
            self.binder.locker.per_node(wait) * nodes, until - loop.time()
        )

    def synced(self) -> bool:
        """Every informer has listed once: the cache reflects the API server."""
        return all(i.synced.is_set() for i in self.informers)

    def unready(self) -> str | None:
        """Why the cache cannot be decided on (/readyz fails, filter and bind refuse)."""
        if not self.synced():
            return "the scheduler's cache has not synced with the API server yet"
        return self.freshness.blind()

    def hopeless(self) -> str | None:
        """Why this process must be restarted (/healthz fails), or None."""
        return self.sight.hopeless()

    async def not_serving(self) -> str | None:
        """Why filter and bind must not be answered now, or None. A replica that has just
        become the leader holds the call until the previous leader's last writes have landed
        (hami.kube.leader): kube-scheduler's cycle waits, where a refusal would send the pod
        into its back-off."""
        if self.closing:
            return "this replica is shutting down; kube-scheduler will retry"
        unready = self.unready()
        if unready is not None:
            return unready
        if await self.leadership.serving(self.settings.bind_write_timeout_seconds) is None:
            return "this replica is not the leader; only the leader serves filter and bind"
        return None


def _log_distrust(namespace: str, name: str, why: str) -> None:
    log.warning(
        "allocation annotation not counted as written",
        extra={"namespace": namespace, "pod": name, "reason": why},
    )


def _edit_ignored(
    events: EventRecorder, leading: Callable[[], bool]
) -> Callable[[str, str, str, str], None]:
    """A bound pod's allocation edited: every replica logs it, the leader tells the pod."""

    def told(namespace: str, name: str, uid: str, what: str) -> None:
        log.warning(
            "allocation edit ignored", extra={"namespace": namespace, "pod": name, "reason": what}
        )
        if leading():
            ref = {"namespace": namespace, "name": name, "uid": uid}
            events.record(ref, "Warning", EventReason.ALLOCATION_EDIT_IGNORED, what)

    return told


async def build(settings: Settings) -> Runtime:
    # A pair given as files is checked before anything connects; a bootstrapped one is made below.
    tls = None if settings.cert_bootstrap_secret else serving_context(*pair(settings))
    kube = Kube(
        await connect(settings.kubeconfig or None),
        timeout=settings.kube_timeout_seconds,
        writes=WriteLimiter(settings.api_write_limit),
    )
    try:
        await require_admission_policy(
            kube, settings.admission_policy_binding, settings.allow_without_admission_policy
        )
        if settings.dra_bookkeeping:
            await require_dra_api(kube)
        certs, cert_file, key_file = await certificates(settings, kube)
    except (OSError, asyncio.CancelledError):  # cancelled: a signal during start-up
        await kube.close()
        raise
    events = EventRecorder(kube, instance=settings.identity, rate=settings.events_per_second)
    leadership: Leadership = (
        LeaseLeadership(
            kube,
            settings.leader_elect_resource_namespace,
            settings.leader_elect_resource_name,
            settings.identity,
            grace=settings.bind_write_timeout_seconds,
        )
        if settings.leader_elect
        else AlwaysLeader()
    )
    # The run's choices (the device families above all), made once: every part gets these.
    choices = of_settings(settings)
    for note in choices.notes:
        log.warning("device config", extra={"note": note})
    locks = choices.locks()
    requeuer = Requeuer(kube, clock=time.monotonic, rate=settings.requeue_rate)
    requeue = requeuer.released if settings.requeue_rate > 0 else None
    cache = choices.cache(
        time.monotonic,
        locks=locks,
        reservation_ttl=settings.reservation_ttl_seconds,
        on_distrust=_log_distrust,
        on_edit_ignored=_edit_ignored(events, lambda: leadership.current() is not None),
        on_release=requeue,
        # A namespace whose GPU quota was raised or lifted frees capacity as a node does.
        on_loosened=requeue,
    )
    metrics = Metrics(
        cache,
        lambda: freshness.staleness(),
        lambda: events.dropped,
        settings.legacy_metrics,
        settings.metrics_pod_labels,
        writes=kube.writes,
        pod_limit=settings.metrics_pod_series_limit,
    )
    kube.on_write = metrics.write_observer()
    labels = LabelMender(kube, lambda: leadership.current() is not None)
    refusals = PluginRefusals(events, lambda: leadership.current() is not None)
    dra = dra_config(settings, choices)
    placer = dra_placer(
        dra,
        kube,
        choices.placement(cache),
        leadership,
        settings.scheduler_name,
        FilterReporter(events, verbosity=settings.v, gated=True),
    )
    pods = PodWatchers(
        replace=[cache.replace_pods],
        upsert=[cache.upsert_pod],
        delete=[cache.delete_pod, requeuer.gone, labels.gone, *([placer.gone] if placer else [])],
        seen=[requeuer.seen, labels.seen, refusals.seen, *([placer.seen] if placer else [])],
    )
    placement = choices.placement(cache)
    if settings.preemption:
        facts = PodFacts()
        preempter = Preempter(
            kube,
            cache,
            facts,
            events,
            scheduler_name=settings.scheduler_name,
            hold_seconds=settings.preemption_hold_seconds,
            observe=metrics.preemption_observer(),
            nudge=requeuer.released,
        )
        placement = choices.placement(cache, preempter)
        pods.replace.append(facts.replace)
        pods.upsert.append(facts.upsert)
        pods.delete += [facts.delete, preempter.gone]

    watch = settings.watch_timeout_seconds
    informers = (
        Informer(
            kube,
            "nodes",
            # The cache forwards each Node to the lock table (hami.service.nodelock.table).
            Sink(cache.replace_nodes, cache.upsert_node, each(cache.delete_node)),
            watch_timeout=watch,
        ),
        Informer(
            kube,
            "pods",
            pods.sink(),
            watch_timeout=watch,
            relisting=cache.binds.relisting,
            relisted=cache.binds.relisted,
        ),
        Informer(kube, "resourcequotas", cache.quotas, watch_timeout=watch),
        *(dra_informers(kube, cache, watch) if settings.dra_bookkeeping else ()),
    )
    freshness = Freshness(
        [(i.resource, lambda i=i: i.last_event_monotonic) for i in informers],  # type: ignore[misc]
        cache.binds.unconfirmed_since,
        limits(watch, RECONNECT_CAP, settings.watch_lag_limit_seconds),
        time.monotonic,
    )
    own_pod = {"namespace": settings.pod_namespace, "name": settings.identity, "uid": ""}
    sight = Sight(
        freshness,
        informers[1].relist,
        lambda: all(i.synced.is_set() for i in informers),
        give_up=settings.blind_give_up_seconds,
        clock=time.monotonic,
        relisted=metrics.forced_relists.inc,
        gave_up=lambda why: (
            events.record(own_pod, "Warning", EventReason.BLIND_RESTART, why)
            if settings.pod_namespace
            else None
        ),
    )
    runtime = Runtime(
        settings=settings,
        kube=kube,
        cache=cache,
        informers=informers,
        leadership=leadership,
        events=events,
        requeuer=requeuer,
        labels=labels,
        placement=placement,
        binder=Binder(
            kube,
            cache,
            events,
            now=lambda: datetime.now(UTC),
            locks=locks,
            leadership=leadership,
            budget=bind_budget(settings),
            lock_expiry=timedelta(seconds=settings.node_lock_expiry_seconds),
            lock_wait=settings.node_lock_wait_seconds,
            before_binding=LimitsWriter(kube, choices.families)
            if settings.node_integration == "standalone"
            else None,
            on_failure=lambda reason: metrics.bind_failures.labels(reason).inc(),
            on_unknown=lambda ended: metrics.unknown_outcomes.labels(ended).inc(),
            success_events=settings.success_events,
        ),
        admission=AdmissionService(
            choices.serve_admission(settings),
            cache.quotas.quota,
            cache.quotas.family_quota,
            kube.get_claim_source,
            dra,
            lambda: cache.dra.classes,
        ),
        metrics=metrics,
        tls=tls or serving_context(cert_file, key_file),
        freshness=freshness,
        sight=sight,
        certs=certs,
        placer=placer,
    )
    # A burst's pods go to nodes whose lock is free rather than queue on one (binpack).
    placement.busy = runtime.binder.locker.busy
    metrics.add_probes(
        Probes(
            ready=lambda: runtime.unready() is None,
            blind=lambda: runtime.synced() and freshness.blind() is not None,
            watch_lag=freshness.lag,
            blind_for=sight.blind_for,
            unknown_outcomes=runtime.binder.outcomes.following,
            leader=lambda: leadership.is_leader,
            requeues=lambda: requeuer.touches,
            unschedulable=requeuer.waiting,
            certificate_expiry=lambda: runtime.tls.not_after,
        )
    )
    return runtime


def dra_informers(kube: Kube, cache: ClusterCache, watch: int) -> tuple[Informer, ...]:
    """The DRA objects' informers (hami.cache.dra): their silence blinds the cache as the
    pods' does (hami.cache.freshness), since a claim missed is a card counted short."""
    book = cache.dra
    return (
        Informer(
            kube,
            "resourceslices",
            Sink(book.replace_slices, book.upsert_slice, book.delete_slice),
            watch_timeout=watch,
        ),
        Informer(
            kube,
            "resourceclaims",
            Sink(book.replace_claims, book.upsert_claim, book.delete_claim),
            watch_timeout=watch,
        ),
        Informer(
            kube,
            "deviceclasses",
            Sink(book.replace_classes, book.upsert_class, book.delete_class),
            watch_timeout=watch,
        ),
    )
