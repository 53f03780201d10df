"""What binds tell the cache about the decisions they take up, and what a complete list of the
pods proves about them: a reservation's moves between the stages of hami.cache.reservations,
from filter's decision to the watch's confirmation.

Apart from ClusterCache because none of these moves changes what is counted: a decision's
cards stay counted through every stage. Only a decision that can no longer land leaves, through
the cache's `forget`, which frees its cards and says so.
"""

from collections.abc import Callable

from hami.cache.reservations import Reservations, Stage


class BindStages:
    """The stage moves of the cache's reservations (ClusterCache.binds)."""

    def __init__(
        self, reservations: Reservations, clock: Callable[[], float], forget: Callable[[str], None]
    ) -> None:
        self._reservations = reservations
        self._clock = clock
        self._forget = forget

    def started(self, uid: str) -> None:
        """A bind took the pod's decision up: its cards stay counted until it ends."""
        self._reservations.move(uid, Stage.BINDING, self._clock(), float("inf"))

    def landed(self, uid: str) -> None:
        """The pod's Binding landed: its cards stay counted until the watch shows the pod bound
        or gone, however long that takes (and how long is the watch's lag)."""
        self._reservations.move(uid, Stage.LANDED, self._clock(), float("inf"))

    def unknown(self, uid: str, resource_version: str) -> None:
        """The pod's Binding, sent for `resource_version`, may have landed: its cards stay
        counted, without a deadline and outside the watch's lag, until the pod is read back
        (unknown_ended) or seen unbound at a later version, bound, or gone."""
        self._reservations.move(uid, Stage.UNKNOWN, self._clock(), float("inf"), resource_version)

    def unknown_ended(self, uid: str, node: str, resource_version: str, landed: bool) -> None:
        """The pod read back after its Binding to `node`, sent for `resource_version`, had an
        unknown outcome: it landed, or cannot any more. A newer decision is left alone."""
        if not self._reservations.awaits(uid, node, resource_version):
            return
        if landed:
            self.landed(uid)
        else:
            self._forget(uid)

    def failed(self, uid: str) -> None:
        """The bind did not land: the decision waits for kube-scheduler's next try as any does."""
        now = self._clock()
        self._reservations.move(uid, Stage.DECIDED, now, now + self._reservations.ttl_of(uid))

    def relisting(self) -> None:
        """A complete list of the pods starts (hami.kube.informer calls it)."""
        self._reservations.relisting()

    def relisted(self) -> None:
        """The list that started at relisting() is complete. A Binding that landed before it
        started and is still unconfirmed did not land after all (the pod is unbound) or its
        pod is gone (created, bound and deleted while the watch was out of touch)."""
        for res in self._reservations.landed_before_relist():
            self._forget(res.uid)

    def unconfirmed_since(self) -> float | None:
        """When (clock) the longest-waiting Binding the watch has not yet shown landed."""
        return self._reservations.oldest_unconfirmed()
